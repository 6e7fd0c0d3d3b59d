"""The demo's report is the report ``syncpace report`` writes of the same directories.

Both call :func:`syncpace.diagnose.diagnose_runs`; this holds them to it on the demo's
own two runs (``tests/data/demo``: the traced run and the paced one, as the demo
recorded them on the fabric), through the demo's report phase and the command line.
Compared: the structured result (``diagnose --json`` against the demo's analysis),
the findings, the what-if pacing row, the runs table's pacing row (the A/B verdict),
the verdict, and the whole page. Nothing is left out of the page: it holds no
timestamp, and both read the same directories, so the paths in it are the same too.
The one thing that differs is where each page was written, which the page never says.
The saved runs keep no host counters (``tests/data/make_demo.py`` keeps the rank and
fabric files); ``test_demo.py`` compares the page of a fresh demo, which has them.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from syncpace.cli.main import main
from syncpace.report import jsonout

pytest.importorskip("plotly")

DEMO = [Path(__file__).resolve().parents[1] / "data" / "demo" / r for r in ("trace", "trace-paced")]


def _cli(*argv: str) -> str:
    """What ``syncpace ARGV`` prints; fails unless it exits 0."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    assert code == 0, out.getvalue()[-2000:]
    return out.getvalue()


@pytest.fixture(scope="module")
def demo(demo_runs_report):
    """The demo's report phase on its two runs: its analysis and its page."""
    analysis, page = demo_runs_report
    return analysis, page.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def cli_page(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("cli") / "report.html"
    _cli("report", *map(str, DEMO), "-o", str(out))
    return out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def cli_json() -> str:
    return _cli("diagnose", *map(str, DEMO), "--json")


def _section(page: str, name: str) -> str:
    match = re.search(rf'<section id="{name}".*?</section>', page, re.S)
    assert match, f"no {name} section"
    return match.group(0)


def test_the_structured_result_is_the_same(demo, cli_json):
    """Findings, metrics, comparison and what-if tables, as ``diagnose --json`` prints
    them (compared as text: a NaN is never equal to itself once parsed)."""
    analysis, _ = demo
    assert jsonout.dumps(analysis.to_json()) == cli_json.strip()
    findings = json.loads(cli_json)["findings"]
    assert [f["mode"] for f in findings] == [f.mode for f in analysis.findings]
    assert "straggler" in {f["mode"] for f in findings}  # the planted one, named


def test_both_have_the_pacing_row_of_the_what_if(demo, cli_json):
    """The row the demo used to lack: the live pacer replayed, in every run's table."""
    analysis, _ = demo
    cli_tables = json.loads(cli_json)["what_if"]
    assert len(cli_tables) == len(analysis.what_if) == 2
    for ours, theirs in zip(analysis.what_if, cli_tables, strict=True):
        assert ours is not None and theirs is not None
        assert "pacing" in [r.name for r in ours.rows]
        assert "pacing" in [r["name"] for r in theirs["rows"]]


def test_the_page_is_the_same(demo, cli_page):
    _, page = demo
    assert "pacing on (the live pacer)" in _section(cli_page, "what-if")
    assert _section(page, "what-if") == _section(cli_page, "what-if")
    # the runs table's pacing row: what the paced run's A/B guard decided
    assert "A/B turned off" in _section(cli_page, "runs")
    assert _section(page, "runs") == _section(cli_page, "runs")
    assert _section(page, "verdict") == _section(cli_page, "verdict")
    assert page == cli_page
