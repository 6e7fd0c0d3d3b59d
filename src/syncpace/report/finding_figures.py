"""Each finding's own small picture: the evidence it rests on, one trace per run.

* straggler / locality variance: the named ranks' lateness per step against the others';
* sync amplification: how often each rank arrived last (turns taken, not one culprit);
* fabric contention: transfer inflation over time, next to the busiest links'
  utilisation from the fabric counters when the run directory holds them;
* latency-bound: service time against message size, with the knee;
* bandwidth-bound: bus bandwidth per step against the reference;
* poor overlap / communication-dominated: exposed and overlapped communication per step
  (the timeline of a typical iteration is the report's own, drawn once);
* incomplete trace: collectives per rank; clock uncertainty: the clock error against
  the median arrival skew;
* slow link: how late each rank sees its collectives end, against the fast half;
* stall: iteration time per step, the stalled steps marked;
* healthy: iteration time per step.

The registry (:mod:`syncpace.analysis.modes`) names each mode's figure, a key of
:data:`FIGURES`, or says why the mode has none (its card still shows its evidence); a
test holds the two together.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from syncpace.analysis import Analysis, RunMetrics, modes
from syncpace.report import format as fmt
from syncpace.report.figures import _name, _sample_index, run_colour
from syncpace.report.links import busiest_links, run_window, window_series
from syncpace.report.merge import MergedFinding
from syncpace.report.timeaxis import AXIS, origin_ns

HEIGHT = 300

Figures = list[tuple[str, go.Figure]]


def _small(fig: go.Figure, title: str, x: str, y: str, **kw: object) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        xaxis_title=x,
        yaxis_title=y,
        template="plotly_white",
        height=kw.pop("height", HEIGHT),
        margin={"l": 60, "r": 20, "t": 44, "b": 44},
        legend={"font": {"size": 11}},
        **kw,
    )
    return fig


def _runs(analysis: Analysis, m: MergedFinding) -> list[RunMetrics]:
    """The runs, in order, that show the finding (others have nothing to plot)."""
    present = {run for run, f in m.per_run if f is not None}
    return [r for r in analysis.runs if r.run in present]


def _lateness(analysis: Analysis, m: MergedFinding, who: str) -> Figures:
    fig = go.Figure()
    for run in _runs(analysis, m):
        f = m.finding_in(run.run)
        ranks = list(f.ranks) if f is not None else []
        rs = run.rank_step.with_columns(named=pl.col("rank").is_in(ranks))
        per = (
            rs.group_by("step", "named")
            .agg(late=pl.col("lateness_ns").mean(), typical=pl.col("lateness_ns").median())
            .sort("step")
        )
        mine, others = per.filter(pl.col("named")), per.filter(~pl.col("named"))
        name, colour = _name(analysis, run), run_colour(analysis, run)
        label = html.escape(fmt.Places.of(run.placement).ranks(ranks))
        fig.add_scatter(
            x=mine["step"], y=mine["late"] / 1e6, name=f"{label} — {name}", line={"color": colour}
        )
        fig.add_scatter(
            x=others["step"],
            y=others["typical"] / 1e6,
            name=f"other ranks (median) — {name}",
            line={"color": colour, "dash": "dot"},
        )
    title = f"{who}: lateness per iteration against the other ranks"
    return [(title, _small(fig, title, "step", "late by (ms)"))]


def straggler(analysis: Analysis, m: MergedFinding) -> Figures:
    return _lateness(analysis, m, "The late ranks")


def locality_variance(analysis: Analysis, m: MergedFinding) -> Figures:
    local = m.first.evidence.get("local_rank")
    return _lateness(analysis, m, f"Local rank {local}" if local is not None else "The late ranks")


def sync_amplification(analysis: Analysis, m: MergedFinding) -> Figures:
    fig = go.Figure()
    for run in _runs(analysis, m):
        pr = run.per_rank.sort("rank")
        fig.add_bar(
            x=[html.escape(fmt.Places.of(run.placement).short(r)) for r in pr["rank"]],
            y=pr["last_share"] * 100,
            name=_name(analysis, run),
            marker={"color": run_colour(analysis, run)},
        )
    title = "Who arrived last: ranks take turns (no single culprit)"
    return [(title, _small(fig, title, "rank (host)", "iterations last (%)", barmode="group"))]


def _inflation(run: RunMetrics, knee: int) -> pl.DataFrame:
    """Per collective at or above the knee: time since the run's first collective (s)
    and its
    service time over the run's own 5th percentile for the same op, group size and
    power-of-two size — the detector's measure of inflation."""
    inst = _measurable(run.instances).filter(
        pl.col("complete"), pl.col("bytes") >= knee, pl.col("service_ns") > 0
    )
    if inst.height == 0:
        return pl.DataFrame(schema={"t_s": pl.Float64, "inflation": pl.Float64})
    size_class = pl.col("bytes").log(2).floor()
    best = pl.col("service_ns").quantile(0.05, "lower").over("op", "n", size_class)
    out = inst.select(
        t_s=(pl.col("last_enter") - origin_ns(run)) / 1e9,
        inflation=pl.col("service_ns") / best,
    )
    return out[_sample_index(out.height)].sort("t_s")


def _measurable(inst: pl.DataFrame) -> pl.DataFrame:
    """The collectives whose times the physics allows (analysis.limits flags the rest)."""
    if "unmeasurable" not in inst.columns:
        return inst
    return inst.filter(pl.col("unmeasurable").is_null())


def fabric_contention(analysis: Analysis, m: MergedFinding) -> Figures:
    runs = _runs(analysis, m)
    links = {run.run: busiest_links(run.run, run_window(run.rank_steps)) for run in runs}
    with_links = any(links.values())
    fig = make_subplots(
        rows=2 if with_links else 1,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        subplot_titles=(
            ("transfer time over the run's best at that size", "busiest links' utilisation")
            if with_links
            else None
        ),
    )
    knee = analysis.thresholds.latency_knee_bytes
    for run in runs:
        name, colour = _name(analysis, run), run_colour(analysis, run)
        infl = _inflation(run, knee)
        fig.add_scatter(
            x=infl["t_s"],
            y=infl["inflation"],
            mode="markers",
            marker={"size": 5, "color": colour, "opacity": 0.6},
            name=f"inflation — {name}",
            row=1,
            col=1,
        )
        window = run_window(run.rank_steps)
        loads = links[run.run]
        if not loads or window is None:
            continue
        series = window_series(run.run, window)
        if series is None:
            continue
        for load, dash in zip(loads, ("solid", "dash", "dot"), strict=False):
            part = series.filter(pl.col("link") == load.link, pl.col("src") == load.src)
            fig.add_scatter(
                x=(part["time_ns"] - origin_ns(run)) / 1e9,
                y=part["util"] * 100,
                mode="lines",
                line={"color": colour, "dash": dash},
                name=html.escape(f"{load.name} — ") + name,
                row=2,
                col=1,
            )
    fig.update_yaxes(title_text="× best", row=1, col=1)
    if with_links:
        fig.update_yaxes(title_text="% of rate", row=2, col=1)
        fig.update_xaxes(title_text=AXIS, row=2, col=1)
    title = "Transfers slow down while the links are full"
    return [
        (
            title,
            _small(
                fig,
                title,
                "" if with_links else AXIS,
                "",
                height=HEIGHT + (160 if with_links else 0),
            ),
        )
    ]


def latency_bound(analysis: Analysis, m: MergedFinding) -> Figures:
    fig = go.Figure()
    knee = analysis.thresholds.latency_knee_bytes
    for run in _runs(analysis, m):
        inst = _measurable(run.instances).filter(pl.col("service_ns") > 0)
        inst = inst[_sample_index(inst.height)]
        fig.add_scatter(
            x=inst["bytes"],
            y=inst["service_ns"] / 1e3,
            mode="markers",
            marker={"size": 4, "opacity": 0.5, "color": run_colour(analysis, run)},
            name=_name(analysis, run),
        )
    fig.add_vline(x=knee, line_dash="dash", annotation_text=f"knee {fmt.size(knee)}")
    title = "Many small collectives pay the latency, not the bandwidth"
    return [
        (
            title,
            _small(
                fig,
                title,
                "message size (bytes)",
                "service time (µs)",
                xaxis_type="log",
                yaxis_type="log",
            ),
        )
    ]


def bandwidth_bound(analysis: Analysis, m: MergedFinding) -> Figures:
    fig = go.Figure()
    knee = analysis.thresholds.latency_knee_bytes
    reference = float(m.first.evidence.get("reference_busbw_gbps") or 0.0)
    typical = float(m.first.evidence.get("busbw_gbps_p50") or reference or 1.0)
    unit, factor = fmt.bandwidth_unit(typical)
    for run in _runs(analysis, m):
        per = (
            run.instances.filter(pl.col("bytes") >= knee, pl.col("busbw_gbps").is_not_null())
            .group_by("step")
            .agg(pl.col("busbw_gbps").median())
            .sort("step")
        )
        fig.add_scatter(
            x=per["step"],
            y=per["busbw_gbps"] * factor,
            name=_name(analysis, run),
            line={"color": run_colour(analysis, run)},
        )
    if reference:
        fig.add_hline(
            y=reference * factor,
            line_dash="dash",
            annotation_text=f"reference {fmt.bandwidth(reference)}",
        )
    title = "Large collectives run near the reference bandwidth"
    return [(title, _small(fig, title, "step", f"busbw, median ({unit})"))]


def overlap(analysis: Analysis, m: MergedFinding) -> Figures:
    fig = go.Figure()
    for run in _runs(analysis, m):
        per = (
            run.overlap.filter(pl.col("step_ns") > 0)
            .group_by("step")
            .agg(
                exposed=(pl.col("exposed_ns") / pl.col("step_ns")).mean(),
                network=(pl.col("comm_ns") / pl.col("step_ns")).mean(),
            )
            .sort("step")
        )
        name, colour = _name(analysis, run), run_colour(analysis, run)
        fig.add_scatter(
            x=per["step"],
            y=per["network"] * 100,
            name=f"network busy — {name}",
            line={"color": colour, "dash": "dot"},
        )
        fig.add_scatter(
            x=per["step"],
            y=per["exposed"] * 100,
            name=f"exposed (not overlapped) — {name}",
            line={"color": colour},
        )
    title = "Communication per iteration: busy and exposed"
    # one typical iteration's swimlanes are in the report's timeline, drawn once there
    return [(title, _small(fig, title, "step", "% of the iteration", yaxis_range=[0, 105]))]


def incomplete_trace(analysis: Analysis, m: MergedFinding) -> Figures:
    fig = go.Figure()
    for run in _runs(analysis, m):
        per = run.rank_step.group_by("rank").agg(pl.col("collectives").sum()).sort("rank")
        counts = dict(zip(per["rank"].to_list(), per["collectives"].to_list(), strict=True))
        ranks = list(range(run.world_size))[:256]
        fig.add_bar(
            x=[str(r) for r in ranks],
            y=[counts.get(r, 0) for r in ranks],
            name=_name(analysis, run),
            marker={"color": run_colour(analysis, run)},
        )
    title = "Collectives recorded per rank (0: no trace)"
    return [(title, _small(fig, title, "rank", "collectives", barmode="group"))]


def clock_uncertainty(analysis: Analysis, m: MergedFinding) -> Figures:
    fig = go.Figure()
    for run in _runs(analysis, m):
        f = m.finding_in(run.run)
        ev = f.evidence if f is not None else {}
        fig.add_bar(
            x=["clock uncertainty", "median arrival skew"],
            y=[(ev.get("clock_uncertainty_ns") or 0) / 1e3, (ev.get("median_skew_ns") or 0) / 1e3],
            name=_name(analysis, run),
            marker={"color": run_colour(analysis, run)},
        )
    title = "Clock error against the skews it would have to resolve"
    return [(title, _small(fig, title, "", "µs", barmode="group"))]


def healthy(analysis: Analysis, m: MergedFinding) -> Figures:
    fig = go.Figure()
    for run in _runs(analysis, m):
        fig.add_scatter(
            x=run.steps["step"],
            y=run.steps["time_ns"] / 1e6,
            name=_name(analysis, run),
            line={"color": run_colour(analysis, run)},
        )
    title = "Iteration time per step"
    return [(title, _small(fig, title, "step", "ms"))]


def slow_link(analysis: Analysis, m: MergedFinding) -> Figures:
    fig = go.Figure()
    for run in _runs(analysis, m):
        f = m.finding_in(run.run)
        lags = (f.evidence.get("transfer_lag_ms") or {}) if f is not None else {}
        places = fmt.Places.of(run.placement)
        fig.add_bar(
            x=[html.escape(places.short(int(r))) for r in lags],
            y=list(lags.values()),
            name=_name(analysis, run),
            marker={"color": run_colour(analysis, run)},
        )
    title = "Collectives end late next to the slow link (median lag behind the others)"
    return [(title, _small(fig, title, "rank (host)", "ms", barmode="group"))]


def stall(analysis: Analysis, m: MergedFinding) -> Figures:
    fig = go.Figure()
    for run in _runs(analysis, m):
        f = m.finding_in(run.run)
        stalled = set(f.evidence.get("steps") or []) if f is not None else set()
        steps = run.steps
        fig.add_scatter(
            x=steps["step"],
            y=steps["time_ns"] / 1e6,
            name=_name(analysis, run),
            line={"color": run_colour(analysis, run)},
        )
        hit = steps.filter(pl.col("step").is_in(sorted(stalled)))
        fig.add_scatter(
            x=hit["step"],
            y=hit["time_ns"] / 1e6,
            mode="markers",
            name=f"stalled — {_name(analysis, run)}",
            marker={"color": run_colour(analysis, run), "size": 11, "symbol": "x"},
        )
    title = "Iteration time per step: a one-off stall"
    return [(title, _small(fig, title, "step", "ms"))]


#: Figure name (a mode's ``figure`` in the registry) -> the function that draws it.
FIGURES: dict[str, Callable[[Analysis, MergedFinding], Figures]] = {
    f.__name__: f
    for f in (
        slow_link,
        stall,
        straggler,
        locality_variance,
        sync_amplification,
        fabric_contention,
        latency_bound,
        bandwidth_bound,
        overlap,
        incomplete_trace,
        clock_uncertainty,
        healthy,
    )
}


def finding_figures(analysis: Analysis, m: MergedFinding) -> Figures:
    """The small figures of one merged finding: those its mode's ``figure`` names
    (none for a mode the registry gives no figure, or does not know)."""
    figure = modes.get(m.mode).figure if modes.is_registered(m.mode) else None
    make = FIGURES.get(figure) if figure is not None else None
    return make(analysis, m) if make is not None else []
