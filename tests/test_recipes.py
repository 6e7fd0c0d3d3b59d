"""The recipe of docs/analysis.md ("Adding a detector"), followed by a test (the one
of docs/imports.md, "Adding an importer", is ``tests/importers/test_recipe.py``).

It is written here, outside the package, the way code of one's own extends it: the
mode through ``modes.register`` and the detector through ``analyze(detectors=...)``
(inside the package the same steps edit ``BUILT_IN`` and ``DETECTORS``). What comes out
must be what the built-in ones give: a finding ranked among the others, its title in
the terminal and the HTML report with its own figure.
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import pytest
from rich.console import Console

from syncpace.analysis import Analysis, Finding, analyze, modes
from syncpace.analysis.detectors import DETECTORS, Context
from syncpace.analysis.modes import Mode, Role
from syncpace.report import finding_figures
from syncpace.report.html import render_html
from syncpace.report.merge import MergedFinding
from syncpace.report.terminal import print_analysis

DATA = Path(__file__).resolve().parent / "data"

# Adding a detector ---------------------------------------------------------------------

#: Step 1: the mode.
LONG = Mode(
    "long_iterations",
    "Long iterations (recipe)",
    Role.CAUSE,
    detector=f"{__name__}.long_iterations",
    figure="long_iterations",
)


def long_iteration_advice(share: float) -> tuple[str, ...]:
    """Step 3: its actions, from what the detector found."""
    return (f"Look at the {share:.0%} of iterations longer than the median by 1 % or more.",)


def long_iterations(ctx: Context) -> list[Finding]:
    """Step 2: the detector. Iterations 1 % above the median are its (made-up) cause;
    what they cost is measured here, the built-in detectors replay it instead."""
    times = ctx.metrics.steps["time_ns"]
    median = float(times.median() or 0.0)
    long = times.filter(times > 1.01 * median)
    if median <= 0 or long.len() == 0:
        return []
    share = long.len() / times.len()
    cost = float((long - median).sum()) / float(times.sum())
    return [
        ctx.finding(
            LONG.name,
            cost,
            min(1.0, 2 * share),
            f"{share:.0%} of iterations run 1 % or more above the median",
            evidence={"long_share": round(share, 4), "iteration_ms": round(median / 1e6, 4)},
            actions=long_iteration_advice(share),
        )
    ]


FIGURE_TITLE = "Iteration time against the median (recipe)"


def long_iteration_figure(analysis: Analysis, m: MergedFinding) -> list[tuple[str, go.Figure]]:
    """Step 5: its picture."""
    fig = go.Figure()
    for run in analysis.runs:
        steps = run.steps
        fig.add_scatter(x=steps["step"], y=steps["time_ns"] / steps["time_ns"].median())
    fig.update_layout(title={"text": FIGURE_TITLE})
    return [(FIGURE_TITLE, fig)]


@pytest.fixture
def long_mode(monkeypatch):
    """The recipe's mode registered, and its figure, for one test."""
    modes.register(LONG)
    monkeypatch.setitem(finding_figures.FIGURES, LONG.figure, long_iteration_figure)
    yield LONG
    modes.unregister(LONG.name)


def test_a_detector_added_by_the_recipe_comes_out_of_analyze(long_mode: Mode) -> None:
    # Step 4: run it with the others.
    analysis = analyze(DATA / "straggler", detectors=(*DETECTORS, long_iterations))
    found = [f for f in analysis.findings if f.mode == long_mode.name]
    assert len(found) == 1 and found[0].actions and found[0].cost > 0
    assert analysis.top.mode == "straggler"  # ranked among the others, not replacing them

    console = Console(record=True, width=160, color_system=None)
    print_analysis(analysis, console)
    assert long_mode.title in console.export_text()

    page = render_html(analysis, plotly_js="")
    assert f'data-mode="{long_mode.name}"' in page and long_mode.title in page
    assert FIGURE_TITLE in page


def test_without_the_recipe_s_detector_nothing_changes(long_mode: Mode) -> None:
    plain = analyze(DATA / "straggler")
    assert long_mode.name not in {f.mode for f in plain.findings}
