"""The per-step stacked bars of the report: each iteration's compute, exposed
communication and wait for the last rank, averaged over ranks, stacked to the
iteration's time (:mod:`syncpace.analysis.breakdown`). Loads plotly."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import polars as pl

from syncpace.analysis.breakdown import Breakdown

#: Bars drawn at most; longer runs are binned into groups of consecutive steps.
MAX_BARS = 400
#: (column, legend, colour): compute at the bottom, the time lost to the others on top.
PARTS = (
    ("compute_ms", "compute", "#4c78a8"),
    ("exposed_ms", "exposed communication", "#f58518"),
    ("wait_ms", "waiting for the last rank", "#e45756"),
)


def binned(steps: pl.DataFrame, max_bars: int = MAX_BARS) -> tuple[pl.DataFrame, int]:
    """``steps`` in at most ``max_bars`` rows (means of consecutive steps), and how many
    steps each row holds."""
    per_bar = max(1, math.ceil(steps.height / max_bars))
    if per_bar == 1:
        return steps, 1
    cols = [c for c, _, _ in PARTS] + ["step_ms"]
    out = (
        steps.with_row_index("_i")
        .with_columns(_bin=pl.col("_i") // per_bar)
        .group_by("_bin")
        .agg(pl.col("step").first(), *(pl.col(c).mean() for c in cols))
        .sort("_bin")
        .drop("_bin")
    )
    return out, per_bar


def step_bars(b: Breakdown) -> go.Figure:
    """One stacked bar per iteration (or per bin of iterations on long runs)."""
    steps, per_bar = binned(b.steps)
    fig = go.Figure()
    for column, name, colour in PARTS:
        fig.add_bar(x=steps["step"], y=steps[column], name=name, marker_color=colour)
    title = "Each iteration: compute, exposed communication, waiting for the last rank"
    if per_bar > 1:
        title += f" (means of {per_bar} iterations a bar)"
    fig.update_layout(
        barmode="stack",
        template="plotly_white",
        height=360,
        title={"text": title, "y": 0.97},
        margin={"t": 70},
        xaxis_title="iteration" if per_bar == 1 else "first iteration of the bar",
        yaxis_title="ms, mean over ranks",
        legend={"orientation": "h", "y": -0.2},
    )
    return fig
