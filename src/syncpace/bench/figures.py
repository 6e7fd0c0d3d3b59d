"""Plotly figures of a benchmark run, for the HTML report.

Host names come from the run, so they are HTML-escaped before they reach a label
(plotly renders a subset of HTML).
"""

from __future__ import annotations

import html
import math
from typing import Any

import plotly.graph_objects as go

from syncpace.bench.results import AlphaBetaFit, PairMatrix


def _labels(matrix: PairMatrix) -> list[str]:
    return [html.escape(f"{r} {h}") for r, h in enumerate(matrix.hosts)]


def pair_matrix_figure(matrix: PairMatrix) -> go.Figure:
    """Heatmap of point-to-point bandwidth from row rank to column rank; hover shows the
    latency; slow pairs are marked with a cross and the suspect ranks named in the title."""
    labels = _labels(matrix)
    n = matrix.world_size
    z = [[math.nan if v is None else v for v in row] for row in matrix.bandwidth_gbps]
    latency = [[math.nan if v is None else v for v in row] for row in matrix.latency_us]
    fig = go.Figure()
    fig.add_heatmap(
        z=z,
        x=labels,
        y=labels,
        customdata=latency,
        colorscale="Viridis",
        colorbar={"title": "GB/s"},
        hoverongaps=False,
        hovertemplate="%{y} → %{x}<br>%{z:.4g} GB/s<br>latency %{customdata:.1f} µs<extra></extra>",
    )
    if matrix.slow:
        fig.add_scatter(
            x=[labels[p.dst] for p in matrix.slow],
            y=[labels[p.src] for p in matrix.slow],
            mode="markers",
            marker={"symbol": "x", "size": 12, "color": "red"},
            name=f"slow (< {matrix.slow_fraction:.0%} of upper quartile)",
            text=[f"{p.ratio:.0%}" for p in matrix.slow],
            hovertemplate="%{y} → %{x}: slow, %{text} of the reference<extra></extra>",
        )
    title = f"Point-to-point bandwidth, {n} ranks ({matrix.message_bytes:,} B messages)"
    if matrix.suspects:
        named = ", ".join(labels[r] for r in matrix.suspects)
        title += f" — every pair of {named} is slow"
    size = max(420, min(1200, 28 * n + 200))
    fig.update_layout(
        title=title,
        xaxis_title="to rank",
        yaxis_title="from rank",
        template="plotly_white",
        height=size,
        width=size + 120,
        yaxis={"autorange": "reversed"},
    )
    return fig


def busbw_figure(bench: dict[str, Any]) -> go.Figure:
    """Bus bandwidth against size per op (``bench`` as :func:`load_bench` returns it),
    with the α–β model of each op as a dashed line."""
    fig = go.Figure()
    fits = bench.get("fits", {})
    for op in dict.fromkeys(r["op"] for r in bench["rows"]):
        rows = [r for r in bench["rows"] if r["op"] == op]
        sizes = [r["size_bytes"] for r in rows]
        fig.add_scatter(x=sizes, y=[r["busbw_gbps"] for r in rows], mode="lines+markers", name=op)
        if op in fits:
            data = dict(fits[op])
            beta = data["beta_gbps"]
            fit = AlphaBetaFit(
                op=op,
                alpha_us=data["alpha_us"],
                beta_gbps=math.inf if beta is None else beta,
                knee_bytes=math.inf if data["knee_bytes"] is None else data["knee_bytes"],
                bus_factor=data["bus_factor"],
                points=data["points"],
                max_rel_error=data["max_rel_error"],
            )
            model = [s * fit.bus_factor / fit.predict_us(s) / 1e3 for s in sizes]
            fig.add_scatter(
                x=sizes,
                y=model,
                mode="lines",
                line={"dash": "dash", "width": 1},
                name=f"{op} fit (α {fit.alpha_us:.0f} µs, β {fit.beta_gbps:.3g} GB/s)",
            )
    fig.update_layout(
        title=f"Bus bandwidth per op, {bench['world_size']} ranks ({bench['backend']})",
        xaxis_title="size (B)",
        yaxis_title="busbw (GB/s)",
        template="plotly_white",
        xaxis_type="log",
        height=420,
    )
    return fig
