"""The recipes of the docs, followed by a test: a detector with its mode
(docs/analysis.md, "Adding a detector") and an importer with its format
(docs/imports.md, "Adding an importer").

Both are written here, outside the package, the way code of one's own extends it: the
mode through ``modes.register`` and the detector through ``analyze(detectors=...)``
(inside the package the same steps edit ``BUILT_IN`` and ``DETECTORS``), the format
through a line in ``importers.FORMATS``. What comes out must be what the built-in
ones give: a finding ranked among the others, its title in the terminal and the HTML
report with its own figure; a run directory that ``load_trace`` reads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import plotly.graph_objects as go
import polars as pl
import pytest
from rich.console import Console

from syncpace import importers
from syncpace.analysis import Analysis, Finding, analyze, modes
from syncpace.analysis.detectors import DETECTORS, Context
from syncpace.analysis.modes import Mode, Role
from syncpace.importers import tracebuild
from syncpace.importers.config import ImportConfig
from syncpace.importers.tracebuild import ImportResult, RankInput
from syncpace.report import finding_figures
from syncpace.report.html import render_html
from syncpace.report.merge import MergedFinding
from syncpace.report.terminal import print_analysis
from syncpace.trace.reader import load_trace

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


# Adding an importer ----------------------------------------------------------------------

#: A made-up format: one line per collective on a rank, ``rank step op bytes enter_us
#: exit_us``, all ranks in one all-reduce group.
TOY_LINES = """\
# rank step op bytes enter_us exit_us
0 0 all_reduce 4096 100 180
1 0 all_reduce 4096 130 181
0 1 all_reduce 4096 300 370
1 1 all_reduce 4096 310 371
0 2 all_reduce 4096 500 590
1 2 all_reduce 4096 560 592
"""


def _toy_rank(rank: int, rows: list[list[str]]) -> RankInput:
    """One rank's collectives in the importers' input columns, and its steps."""
    events = pl.DataFrame(
        {
            "group": "0",
            "group_size": 2,
            "seq": tracebuild.UNKNOWN,  # numbered by tracebuild
            "op": [r[2] for r in rows],
            "bytes": [int(r[3]) for r in rows],
            "dtype": "float32",
            "peer": -1,
            "enter_ns": [int(r[4]) * 1000 for r in rows],
            "exit_ns": [int(r[5]) * 1000 for r in rows],
            "timing": "call",
            "status": "completed",
            "error": None,
            "wait_ns": -1,
            "call_ns": [int(r[4]) * 1000 for r in rows],
        }
    ).cast(tracebuild.INPUT_COLUMNS)  # type: ignore[arg-type]
    steps = pl.DataFrame(
        {
            "step": [int(r[1]) for r in rows],
            "start_ns": [int(r[4]) * 1000 - 50_000 for r in rows],
            "end_ns": [int(r[5]) * 1000 + 10_000 for r in rows],
        }
    )
    return RankInput(
        rank=rank,
        events=events,
        steps=steps,
        step_rule="spans",
        host="toyhost",
        backend="gloo",
        groups={"0": {"ranks": [0, 1], "backend": "gloo"}},
    )


def convert(
    sources: list[str | Path],
    out_dir: str | Path,
    *,
    config: ImportConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ImportResult:
    """The format's ``convert``: read, hand each rank to ``tracebuild.write_trace``."""
    rows = [
        line.split()
        for src in sources
        for line in Path(src).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    inputs = [_toy_rank(rank, [r for r in rows if int(r[0]) == rank]) for rank in (0, 1)]
    return tracebuild.write_trace(
        inputs,
        out_dir,
        fmt="toy-lines",
        source="toy-lines",
        config=config or ImportConfig(),
        missing=["dtypes (the format records none)"],
    )


def test_an_importer_added_by_the_recipe_writes_a_trace_load_trace_reads(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setitem(
        importers.FORMATS,
        "toy-lines",
        importers.Format("toy-lines", __name__, "a made-up format, one line per call"),
    )
    source = tmp_path / "calls.txt"
    source.write_text(TOY_LINES)
    result = importers.convert("toy-lines", [source], tmp_path / "run")
    assert result.format == "toy-lines" and result.world_size == 2 and result.events == 6
    trace = load_trace(result.out_dir)
    events = trace.events.sort("rank", "enter_ns")
    assert events.height == 6 and set(events["op"]) == {"all_reduce"}
    assert events.group_by("rank").agg(pl.col("seq").sort())["seq"].to_list() == [[0, 1, 2]] * 2
    assert trace.steps.height == 6
    assert importers.available()["toy-lines"]
