"""Figures from files other producers leave in a run directory.

* ``bench.json`` (``syncpace bench``): the pairwise bandwidth heatmap with slow pairs,
  and busbw against size with the α–β fits.
* ``fabric-links.arrow`` (``syncpace fabric run``): utilisation of every link
  direction over time, so hot spots show.

A damaged or absent file never stops the report: it becomes a note instead.
"""

from __future__ import annotations

import html
from pathlib import Path

import plotly.graph_objects as go
import polars as pl

from syncpace.analysis.links import KIND_WORDS
from syncpace.bench.figures import busbw_figure, pair_matrix_figure
from syncpace.bench.results import load_bench, load_pair_matrix
from syncpace.errors import SyncpaceError
from syncpace.report.links import link_series
from syncpace.trace.schema import LINKS_FILE


def link_utilisation_figure(path: Path) -> go.Figure | None:
    """Heatmap of link direction × time: Δbytes·8 / Δt / rate (see docs/fabric.md)."""
    util = link_series(path)
    if util.height == 0:
        return None
    util = util.with_columns(
        # each direction by its one name (analysis.links.link_name)
        direction=pl.concat_str(
            pl.col("kind").replace(KIND_WORDS), pl.lit(" "), "src", pl.lit("→"), "dst"
        ),
        t_s=(pl.col("time_ns") - pl.col("time_ns").min()) / 1e9,
    )
    wide = util.pivot(on="direction", index="t_s", values="util", aggregate_function="mean").sort(
        "t_s"
    )
    names = [c for c in wide.columns if c != "t_s"]
    fig = go.Figure(
        go.Heatmap(
            z=[wide[c].to_list() for c in names],
            x=wide["t_s"].to_list(),
            y=[html.escape(n) for n in names],
            colorscale="YlOrRd",
            zmin=0,
            zmax=1,
            colorbar={"title": "utilisation"},
            hovertemplate="%{y}<br>%{x:.1f} s: %{z:.0%} of its rate<extra></extra>",
        )
    )
    fig.update_layout(
        title="Link utilisation (fabric counters; 1 = configured rate)",
        xaxis_title="time (s)",
        yaxis_title="link direction",
        template="plotly_white",
        height=max(320, 22 * len(names) + 160),
    )
    return fig


def run_extras(run_dir: str | Path) -> tuple[list[tuple[str, go.Figure]], list[str]]:
    """(figures, notes) for one run directory."""
    root = Path(run_dir)
    figures: list[tuple[str, go.Figure]] = []
    notes: list[str] = []
    if (root / "bench.json").exists():
        try:
            matrix = load_pair_matrix(root)
            if matrix is not None:
                figures.append((f"Pairwise bandwidth — {root}", pair_matrix_figure(matrix)))
            figures.append(
                (f"Benchmark busbw and α–β fits — {root}", busbw_figure(load_bench(root)))
            )
        except (SyncpaceError, ValueError, KeyError, TypeError) as exc:
            notes.append(f"{root / 'bench.json'}: not shown ({exc})")
    if (root / LINKS_FILE).exists():
        try:
            fig = link_utilisation_figure(root / LINKS_FILE)
            if fig is not None:
                figures.append((f"Link utilisation — {root}", fig))
        except Exception as exc:  # a damaged counters file must not stop the report
            notes.append(f"{root / LINKS_FILE}: not shown ({type(exc).__name__})")
    return figures, notes
