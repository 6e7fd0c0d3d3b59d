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
from syncpace.report.timeaxis import AXIS
from syncpace.trace.schema import LINKS_FILE


def link_utilisation_figure(path: Path, origin_ns: int | None = None) -> go.Figure | None:
    """Heatmap of link direction × time: Δbytes·8 / Δt / rate (see docs/fabric.md);
    time in seconds since ``origin_ns`` (the run's first collective; the first sample
    without one)."""
    util = link_series(path)
    if util.height == 0:
        return None
    t0 = pl.col("time_ns").min() if origin_ns is None else pl.lit(origin_ns)
    util = util.with_columns(
        # each direction by its one name (analysis.links.link_name)
        direction=pl.concat_str(
            pl.col("kind").replace(KIND_WORDS), pl.lit(" "), "src", pl.lit("→"), "dst"
        ),
        t_s=(pl.col("time_ns") - t0) / 1e9,
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
        xaxis_title=AXIS if origin_ns is not None else "time since the first sample (s)",
        yaxis_title="link direction",
        template="plotly_white",
        height=max(320, 22 * len(names) + 160),
    )
    return fig


def run_extras(
    run_dir: str | Path, name: str | None = None, origin_ns: int | None = None
) -> tuple[list[tuple[str, go.Figure]], list[str]]:
    """(figures, notes) for one run directory, titled by the run's ``name`` (its
    directory without one: a page may travel, its titles carry no local path)."""
    root = Path(run_dir)
    name = name or root.name
    figures: list[tuple[str, go.Figure]] = []
    notes: list[str] = []
    if (root / "bench.json").exists():
        try:
            matrix = load_pair_matrix(root)
            if matrix is not None:
                figures.append(_titled(f"Pairwise bandwidth — {name}", pair_matrix_figure(matrix)))
            figures.append(
                _titled(f"Benchmark busbw and α–β fits — {name}", busbw_figure(load_bench(root)))
            )
        except (SyncpaceError, ValueError, KeyError, TypeError) as exc:
            notes.append(f"{name}/bench.json: not shown ({_without(exc, root)})")
    if (root / LINKS_FILE).exists():
        try:
            fig = link_utilisation_figure(root / LINKS_FILE, origin_ns)
            if fig is not None:
                figures.append(_titled(f"Link utilisation — {name}", fig))
        except Exception as exc:  # a damaged counters file must not stop the report
            notes.append(f"{name}/{LINKS_FILE}: not shown ({type(exc).__name__})")
    return figures, notes


def _titled(section: str, fig: go.Figure) -> tuple[str, go.Figure]:
    """(section, figure) with the section (which names the run) leading the figure's
    own title: the report draws a figure's title as its heading."""
    own = fig.layout.title.text
    fig.update_layout(title=f"{html.escape(section)}: {own}" if own else html.escape(section))
    return section, fig


def _without(exc: Exception, root: Path) -> str:
    """An error's text with the run directory's local path taken out."""
    return str(exc).replace(str(root.resolve()), ".").replace(str(root), ".")
