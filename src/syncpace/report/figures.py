"""Plotly figures of an analysis: the overview of every run, overlaid where runs share
an axis. Every string that comes from a trace is HTML-escaped before it reaches a
figure (plotly renders a subset of HTML in labels). Axis units follow the magnitude of
the values (``report.format``): a 100 Mbit/s fabric reads in Mbit/s, not as 0.003 GB/s.
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from syncpace.analysis import Analysis, RunMetrics
from syncpace.report import format as fmt
from syncpace.report.extras import run_extras
from syncpace.report.timeaxis import AXIS, origin_ns

_MAX_HEATMAP_STEPS = 400  # columns; longer runs are binned so the page stays light
_MAX_POINTS = 20_000  # scatter points; more are sampled (seeded)
#: The section title of the iteration-time figure (the report places it by the runs).
ITERATION_TIME = "Iteration time"
#: One colour per run, the same in every figure of a report.
RUN_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")


def run_colour(analysis: Analysis, run: RunMetrics) -> str:
    index = next((i for i, r in enumerate(analysis.runs) if r.run == run.run), 0)
    return RUN_COLOURS[index % len(RUN_COLOURS)]


def run_label(analysis: Analysis, run: RunMetrics) -> str:
    """The run's short name, with its world size when runs differ in it (raw text)."""
    name = fmt.run_names([r.run for r in analysis.runs])[run.run]
    if analysis.study == "scaling":
        name += f" ({run.world_size} ranks)"
    return name


def _name(analysis: Analysis, run: RunMetrics) -> str:
    """The run's label, escaped for a figure."""
    return html.escape(run_label(analysis, run))


def _layout(fig: go.Figure, title: str, x: str, y: str, **kw: object) -> go.Figure:
    settings = {"height": 420, **kw}
    fig.update_layout(
        title=title, xaxis_title=x, yaxis_title=y, template="plotly_white", **settings
    )
    return fig


def iteration_timeline(analysis: Analysis) -> go.Figure:
    fig = go.Figure()
    for run in analysis.runs:
        s, name, colour = run.steps, _name(analysis, run), run_colour(analysis, run)
        fig.add_scatter(
            x=s["step"], y=s["time_ns"] / 1e6, mode="lines", name=name, line={"color": colour}
        )
        per = (
            run.rank_steps.group_by("step")
            .agg(lo=pl.col("step_ns").min(), hi=pl.col("step_ns").max())
            .sort("step")
        )
        for label, col in (("slowest rank", "hi"), ("fastest rank", "lo")):
            fig.add_scatter(
                x=per["step"],
                y=per[col] / 1e6,
                mode="lines",
                line={"width": 0.7, "dash": "dot", "color": colour},
                name=f"{label} — {name}",
            )
    return _layout(fig, "Iteration time per step", "step", "iteration time (ms)")


def lateness_heatmap(analysis: Analysis, run: RunMetrics) -> go.Figure:
    rs = run.rank_step
    fig = go.Figure()
    if rs.height:
        steps = rs["step"].unique().sort()
        width = max(1, -(-steps.len() // _MAX_HEATMAP_STEPS))
        binned = (
            rs.with_columns(bin=(pl.col("step") // width) * width)
            .group_by("rank", "bin")
            .agg(pl.col("lateness_ns").mean())
        )
        wide = binned.pivot(on="bin", index="rank", values="lateness_ns", sort_columns=True)
        wide = wide.sort("rank")
        cols = sorted((c for c in wide.columns if c != "rank"), key=int)
        z = wide.select(cols).to_numpy() / 1e6
        labels = rank_labels(run, wide["rank"].to_list())
        fig.add_heatmap(
            z=z,
            x=[int(c) for c in cols],
            y=labels,
            colorscale="Reds",
            colorbar={"title": "ms late"},
            hovertemplate="%{y}<br>step %{x}: %{z:.3g} ms late<extra></extra>",
        )
    return _layout(
        fig,
        f"Lateness per rank and iteration — {_name(analysis, run)}",
        "step",
        "rank (host)",
        height=max(320, min(1200, 16 * len(run.ranks) + 160)),
    )


def rank_labels(run: RunMetrics, ranks: list[int]) -> list[str]:
    places = fmt.Places.of(run.placement)
    return [html.escape(places.short(r)) for r in ranks]


def wait_and_skew(analysis: Analysis, run: RunMetrics) -> go.Figure:
    fig = go.Figure()
    pr = (
        run.rank_step.group_by("rank")
        .agg(
            p50=pl.col("wait_ns").median(),
            p90=pl.col("wait_ns").quantile(0.9, "linear"),
            late50=pl.col("lateness_ns").median(),
            late90=pl.col("lateness_ns").quantile(0.9, "linear"),
        )
        .sort("rank")
    )
    labels = rank_labels(run, pr["rank"].to_list())
    fig.add_bar(x=labels, y=pr["p50"] / 1e6, name="wait, median")
    fig.add_bar(x=labels, y=pr["p90"] / 1e6, name="wait, p90")
    fig.add_bar(x=labels, y=pr["late50"] / 1e6, name="lateness, median")
    fig.add_bar(x=labels, y=pr["late90"] / 1e6, name="lateness, p90")
    if run.instances.height:
        skew = _sample(run.instances["skew_ns"].drop_nulls().to_numpy()) / 1e6
        fig.add_histogram(
            x=skew, name="arrival skew per collective", xaxis="x2", yaxis="y2", opacity=0.7
        )
    return _layout(
        fig,
        f"Per-rank wait and lateness; arrival skew — {_name(analysis, run)}",
        "rank (host)",
        "ms",
        barmode="group",
        height=520,
        xaxis={"domain": [0, 1], "anchor": "y"},
        yaxis={"domain": [0.45, 1]},
        xaxis2={"domain": [0, 1], "anchor": "y2", "title": "arrival skew (ms)"},
        yaxis2={"domain": [0, 0.32], "title": "collectives"},
    )


def step_cdf(analysis: Analysis) -> go.Figure:
    fig = go.Figure()
    for run in analysis.runs:
        t = np.sort(run.steps["time_ns"].drop_nulls().to_numpy()) / 1e6
        if len(t):
            fig.add_scatter(
                x=t,
                y=np.arange(1, len(t) + 1) / len(t),
                mode="lines",
                name=_name(analysis, run),
                line={"color": run_colour(analysis, run), "shape": "hv"},
            )
    return _layout(fig, "CDF of iteration times", "iteration time (ms)", "fraction of iterations")


def busbw_vs_size(analysis: Analysis) -> go.Figure:
    """Each collective's busbw against its size, and the link rate where it is known:
    values above it or shorter than the clocks resolve are left out (analysis.limits),
    the figure's note says how many and why."""
    fig = go.Figure()
    values = [
        r.instances["busbw_gbps"].drop_nulls().median() for r in analysis.runs if r.instances.height
    ]
    typical = float(np.median([v for v in values if v is not None] or [1.0]))
    unit, factor = fmt.bandwidth_unit(typical)
    symbols = ("circle", "diamond", "square", "x", "triangle-up", "cross")
    for run in analysis.runs:
        inst = run.instances.filter(pl.col("busbw_gbps").is_not_null())
        ops = sorted(inst["op"].unique().to_list()) if inst.height else []
        for i, op in enumerate(ops):
            part = inst.filter(pl.col("op") == op)
            keep = _sample_index(part.height)
            fig.add_scatter(
                x=part["bytes"].to_numpy()[keep],
                y=part["busbw_gbps"].to_numpy()[keep] * factor,
                mode="markers",
                marker={
                    "size": 5,
                    "opacity": 0.5,
                    "color": run_colour(analysis, run),
                    "symbol": symbols[i % len(symbols)],
                },
                name=html.escape(f"{op} — ") + _name(analysis, run),
            )
    rates = {r.link.gbps: r.link for r in analysis.runs if r.link is not None}
    for link in rates.values():
        fig.add_hline(
            y=link.gbps * factor,
            line_dash="dash",
            line_color="#555",
            annotation_text=html.escape(f"link rate {fmt.bandwidth(link.gbps)}"),
            annotation_position="top left",
        )
    notes = [
        f"{run_label(analysis, r)}: {u.count} of {u.total} left out, {u.reason}."
        for r in analysis.runs
        for u in r.unmeasurable
        if u.what == "busbw"
    ]
    if notes:
        fig.update_layout(meta={"note": " ".join(notes)})
    return _layout(
        fig,
        "Bus bandwidth vs message size (busbw assumes a flat topology)",
        "message size (bytes)",
        f"busbw ({unit})",
        xaxis_type="log",
    )


def scaling(analysis: Analysis) -> go.Figure:
    pts = analysis.scaling
    fig = go.Figure()
    n = [p.world_size for p in pts]
    n0 = n[0] if n else 1
    fig.add_scatter(
        x=n, y=[p.strong_speedup for p in pts], mode="lines+markers", name="strong speedup"
    )
    fig.add_scatter(x=n, y=[p.weak_speedup for p in pts], mode="lines+markers", name="weak speedup")
    fig.add_scatter(x=n, y=[x / n0 for x in n], mode="lines", line={"dash": "dash"}, name="ideal")
    fig.add_scatter(
        x=n,
        y=[p.weak_efficiency for p in pts],
        mode="lines+markers",
        name="weak efficiency",
        yaxis="y2",
    )
    return _layout(
        fig,
        "Scaling across world sizes",
        "world size (ranks)",
        "speedup vs smallest run",
        yaxis2={"overlaying": "y", "side": "right", "title": "efficiency", "range": [0, 1.1]},
    )


#: At most this many NIC directions in the counters figure (the busiest first).
_MAX_NIC_LINES = 16


def host_nic_counters(analysis: Analysis, run: RunMetrics) -> go.Figure | None:
    """Per-NIC utilisation and loss over time from the hosts' own counters, above the
    iteration times on the same clock (None when no host was sampled)."""
    hosts = run.hosts
    if hosts is None or hosts.windows.height == 0:
        return None
    w = hosts.windows
    t0 = origin_ns(run)
    # ties broken by name: group_by's order is arbitrary, and one analysis draws one page
    busiest = (
        w.group_by("host", "device", "direction")
        .agg(peak=pl.col("util").max())
        .sort(
            "peak",
            "host",
            "device",
            "direction",
            descending=[True, False, False, False],
            nulls_last=True,
        )
        .head(_MAX_NIC_LINES)
    )
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        row_heights=[0.45, 0.25, 0.3],
        subplot_titles=(
            f"NIC utilisation per {hosts.window_ns / 1e6:g} ms (1 = link rate)",
            "packets dropped and TCP segments retransmitted per window",
            "iteration time",
        ),
    )
    for host, device, direction, _peak in busiest.iter_rows():
        part = w.filter(
            pl.col("host") == host, pl.col("device") == device, pl.col("direction") == direction
        ).sort("start_ns")
        x = (part["end_ns"] - t0) / 1e9
        label = html.escape(f"{host} {device} {direction}")
        fig.add_scatter(x=x, y=part["util"], mode="lines", name=label, row=1, col=1)
        if part["drops"].sum() > 0:
            fig.add_bar(x=x, y=part["drops"], name=f"drops {label}", row=2, col=1)
    retrans = (
        w.group_by("host", "start_ns", "end_ns")
        .agg(pl.col("tcp_retrans").first())
        .sort("host", "start_ns")  # hosts in name order, not group_by's arbitrary one
    )
    for (host,), part in retrans.group_by("host", maintain_order=True):
        if part["tcp_retrans"].sum() > 0:
            fig.add_scatter(
                x=(part["end_ns"] - t0) / 1e9,
                y=part["tcp_retrans"],
                mode="lines",
                line={"dash": "dot"},
                name=html.escape(f"TCP retransmits {host}"),
                row=2,
                col=1,
            )
    if run.steps.height:
        s = run.steps.sort("step")
        fig.add_scatter(
            x=(s["end"] - t0) / 1e9,
            y=s["time_ns"] / 1e6,
            mode="lines+markers",
            marker={"size": 3},
            name="iteration time (ms)",
            row=3,
            col=1,
        )
    fig.update_yaxes(title_text="utilisation", row=1, col=1)
    fig.update_yaxes(title_text="count", row=2, col=1)
    fig.update_yaxes(title_text="ms", row=3, col=1)
    fig.update_xaxes(title_text=AXIS, row=3, col=1)
    fig.update_layout(template="plotly_white", height=760, barmode="stack")
    fig.update_layout(title=f"Host counters — {_name(analysis, run)}")
    notes = [u.reason for u in run.unmeasurable if u.what == "nic_utilisation"]
    if notes:
        count = sum(u.count for u in run.unmeasurable if u.what == "nic_utilisation")
        fig.update_layout(meta={"note": f"{count} windows left out: {notes[0]}."})
    return fig


def _sample_index(n: int) -> np.ndarray:
    if n <= _MAX_POINTS:
        return np.arange(n)
    return np.sort(np.random.default_rng(0).choice(n, _MAX_POINTS, replace=False))


def _sample(values: np.ndarray) -> np.ndarray:
    return values[_sample_index(len(values))]


def all_figures(analysis: Analysis) -> tuple[list[tuple[str, go.Figure]], list[str]]:
    """(section title, figure) of the overview in page order, and notes on files that
    could not be shown. Runs side by side share a figure where they share an axis; the
    scaling curve is drawn only for a scaling study (runs of different world sizes)."""
    figs = [
        (ITERATION_TIME, iteration_timeline(analysis)),
        ("Iteration time CDF", step_cdf(analysis)),
    ]
    for run in analysis.runs:
        figs.append(
            (f"Lateness heatmap — {run_label(analysis, run)}", lateness_heatmap(analysis, run))
        )
    for run in analysis.runs:
        figs.append((f"Wait and skew — {run_label(analysis, run)}", wait_and_skew(analysis, run)))
    for run in analysis.runs:
        if (counters := host_nic_counters(analysis, run)) is not None:
            figs.append((f"Host NIC counters — {run_label(analysis, run)}", counters))
    figs.append(("Bus bandwidth", busbw_vs_size(analysis)))
    if analysis.study == "scaling":
        figs.append(("Scaling", scaling(analysis)))
    notes: list[str] = []
    for run in analysis.runs:
        extra, extra_notes = run_extras(run.run, run_label(analysis, run), origin_ns(run))
        figs.extend(extra)
        notes.extend(extra_notes)
    return figs, notes
