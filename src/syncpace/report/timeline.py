"""Swimlanes of one iteration: per rank, when it computed, waited, transferred and was
held back by the pacer.

Each rank is a lane. Its iteration (start to end) is the grey bar: compute and
everything between calls. On it, every collective it joined is drawn from its enter:
first the wait for the last member to arrive (red), then the transfer (coloured by op)
to its exit. Calls that overlap in time (asynchronous buckets, two collectives in flight)
take sub-rows of the lane. A pacing delay is the gold bar just before the rank's first
collective of the step, where the controller sleeps. Times are seconds since the run's
first collective in the report (its one origin, ``report.timeaxis``), from the
iteration's first start otherwise. Large jobs show at most :data:`MAX_LANES` ranks: the
named ones, the first and the last to arrive, and an even sample of the rest.
"""

from __future__ import annotations

import html
import shlex
from collections.abc import Sequence

import plotly.graph_objects as go
import polars as pl

from syncpace.analysis.timeline import IterationSample
from syncpace.report import format as fmt
from syncpace.report.timeaxis import AXIS as TIME_AXIS

MAX_LANES = 32
MAX_SUBROWS = 4
OP_COLOURS = {
    "all_reduce": "#1f77b4",
    "all_gather": "#2ca02c",
    "reduce_scatter": "#9467bd",
    "broadcast": "#ff7f0e",
    "reduce": "#17becf",
    "all_to_all": "#8c564b",
    "gather": "#bcbd22",
    "scatter": "#7f7f7f",
    "barrier": "#444444",
    "send": "#e377c2",
    "recv": "#f7b6d2",
}
COMPUTE = "#d9d9d9"
WAIT = "#e57373"
PACING = "#f2c14e"


def lanes(
    sample: IterationSample, step: int, named: Sequence[int] = (), max_lanes: int = MAX_LANES
) -> list[int]:
    """The ranks to draw for ``step``, in rank order: all, or at most ``max_lanes`` —
    the named ones, the first and the last to arrive, an even sample of the rest."""
    ranks = sorted(sample.steps.filter(pl.col("step") == step)["rank"].unique().to_list())
    if len(ranks) <= max_lanes:
        return ranks
    calls = sample.events.filter(pl.col("step") == step)
    keep = [r for r in named if r in ranks][: max_lanes // 2]
    if calls.height:
        first = calls.group_by("rank").agg(pl.col("enter_ns").min()).sort("enter_ns", "rank")
        keep += [int(first["rank"][0]), int(first["rank"][-1])]
    rest = [r for r in ranks if r not in keep]
    room = max_lanes - len(set(keep))
    if room > 0 and rest:
        stride = len(rest) / room
        keep += [rest[int(i * stride)] for i in range(room)]
    return sorted(set(keep))


def _subrows(calls: pl.DataFrame) -> list[int]:
    """A sub-row per call (sorted by enter) so that calls overlapping in time do not
    cover each other: the first sub-row free at its enter, else a new one (at most
    :data:`MAX_SUBROWS`, then the one that frees first)."""
    row_end: list[int] = []
    rows = []
    for enter, end in zip(calls["enter_ns"].to_list(), calls["end_ns"].to_list(), strict=True):
        free = [i for i, e in enumerate(row_end) if e <= enter]
        if free:
            row = free[0]
        elif len(row_end) < MAX_SUBROWS:
            row_end.append(end)
            row = len(row_end) - 1
        else:
            row = min(range(len(row_end)), key=row_end.__getitem__)
        row_end[row] = max(row_end[row], end)
        rows.append(row)
    return rows


def iteration_figure(
    sample: IterationSample,
    step: int,
    places: fmt.Places,
    *,
    title: str,
    named: Sequence[int] = (),
    height: int | None = None,
    max_lanes: int = MAX_LANES,
    origin_ns: int | None = None,
) -> go.Figure:
    """The swimlanes of ``step``; time in seconds since ``origin_ns`` (the run's first
    collective, the report's one origin), or from the iteration's start without it."""
    steps = sample.steps.filter(pl.col("step") == step)
    shown = lanes(sample, step, named, max_lanes)
    steps = steps.filter(pl.col("rank").is_in(shown))
    fig = go.Figure()
    if steps.height == 0:
        return fig
    start = int(steps["start_ns"].min())  # type: ignore[arg-type]
    t0 = start if origin_ns is None else origin_ns
    unit, scale = _unit(int(steps["end_ns"].max()) - start) if origin_ns is None else ("s", 1e-9)  # type: ignore[arg-type]
    y = {r: i for i, r in enumerate(reversed(shown))}
    calls = sample.events.filter(pl.col("step") == step, pl.col("rank").is_in(shown))
    step_end = dict(zip(steps["rank"].to_list(), steps["end_ns"].to_list(), strict=True))
    calls = calls.with_columns(
        end_ns=pl.when(pl.col("exit_ns") >= 0)
        .then(pl.col("exit_ns"))
        .otherwise(pl.col("rank").replace_strict(step_end, default=None))
    ).sort("rank", "enter_ns")
    bars: dict[str, dict[str, list]] = {}

    def add(kind: str, rank: int, start: int, end: int, lane: float, width: float, hover: str):
        b = bars.setdefault(kind, {"x": [], "base": [], "y": [], "width": [], "text": []})
        b["base"].append((start - t0) * scale)
        b["x"].append(max(end - start, 0) * scale)
        b["y"].append(y[rank] + lane)
        b["width"].append(width)
        b["text"].append(hover)

    for row in steps.iter_rows(named=True):
        r = row["rank"]
        length = row["end_ns"] - row["start_ns"]
        add(
            "compute and other work",
            r,
            row["start_ns"],
            row["end_ns"],
            0,
            0.86,
            f"{html.escape(places.rank(r))}<br>iteration {fmt.duration_ns(length)}",
        )
    first_enter = {}
    for rank, part in calls.group_by("rank", maintain_order=True):
        r = int(rank[0])  # type: ignore[index]
        first_enter[r] = int(part["enter_ns"].min())  # type: ignore[arg-type]
        sub = _subrows(part)
        n = max(sub) + 1
        width = 0.7 / n
        for i, c in enumerate(part.iter_rows(named=True)):
            lane = -0.35 + width * (sub[i] + 0.5)
            done = c["exit_ns"] >= 0
            start_transfer = max(c["enter_ns"], c["last_enter_ns"])
            what = html.escape(
                f"{c['op']} {fmt.size(c['bytes'])}, group {c['group']}, seq {c['seq']}"
            )
            wait = start_transfer - c["enter_ns"]
            if wait > 0:
                add(
                    "waiting for the last rank",
                    r,
                    c["enter_ns"],
                    start_transfer,
                    lane,
                    width * 0.9,
                    f"{what}<br>waits {fmt.duration_ns(wait)} for the last rank",
                )
            transfer = c["end_ns"] - start_transfer
            kind = c["op"] if done else f"{c['op']} (did not complete)"
            add(
                kind,
                r,
                start_transfer,
                c["end_ns"],
                lane,
                width * 0.9,
                f"{what}<br>transfer {fmt.duration_ns(transfer)}"
                + ("" if done else "<br>did not complete"),
            )
    for row in steps.iter_rows(named=True):
        delay = row["pacing_delay_ns"] or 0
        if delay > 0:
            r = row["rank"]
            at = first_enter.get(r, row["start_ns"] + delay)
            add(
                "pacing delay",
                r,
                at - delay,
                at,
                0,
                0.86,
                f"{html.escape(places.rank(r))}<br>paced {fmt.duration_ns(delay)}",
            )
    for kind, b in bars.items():
        fig.add_bar(
            orientation="h",
            name=html.escape(kind),
            x=b["x"],
            base=b["base"],
            y=b["y"],
            width=b["width"],
            marker=_marker(kind),
            hovertext=b["text"],
            hoverinfo="text",
        )
    fig.update_layout(
        title=html.escape(title),
        barmode="overlay",
        template="plotly_white",
        height=height or max(280, 30 * len(shown) + 150),
        xaxis_title=(
            f"time from the iteration's start ({unit})" if origin_ns is None else TIME_AXIS
        ),
        yaxis={
            "tickvals": list(y.values()),
            "ticktext": [html.escape(places.short(r)) for r in y],
            "title": "rank (host)",
            "range": [-0.6, len(shown) - 0.4],
        },
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 90, "r": 20, "t": 50, "b": 40},
    )
    return fig


def _unit(span_ns: int) -> tuple[str, float]:
    if span_ns < 2_000_000:
        return "µs", 1e-3
    if span_ns < 20_000_000_000:
        return "ms", 1e-6
    return "s", 1e-9


def _marker(kind: str) -> dict:
    if kind == "compute and other work":
        return {"color": COMPUTE}
    if kind == "waiting for the last rank":
        return {"color": WAIT}
    if kind == "pacing delay":
        return {"color": PACING}
    op = kind.split(" ")[0]
    marker: dict = {"color": OP_COLOURS.get(op, "#555555")}
    if kind.endswith("(did not complete)"):
        marker["pattern"] = {"shape": "/"}
    return marker


def perfetto_hint(run: str, step: int) -> str:
    """How to open the whole trace, every rank and call, at this iteration."""
    return (
        f"The full trace: syncpace export --perfetto {shlex.quote(run)} -o trace.json, then open "
        f'trace.json at ui.perfetto.dev; this iteration is the slice "step {step}" on every '
        "rank's track."
    )
