"""The whole run in the HTML report, read in headless Chromium: the section is there
only for a run with per-step summaries, its figure is drawn with no script error, and
what it states (steps, full-detail ranges, detections) is what was written."""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest

from always_on_run import GOOD, STEPS, WORLD, write_detections, write_run
from syncpace.analysis import analyze
from syncpace.analysis.wholerun import intervals
from syncpace.report.browser import dump_dom
from syncpace.report.html import write_html
from syncpace.trace import load_trace

DATA = Path(__file__).resolve().parents[1] / "data"
HOSTILE_HOST = "<img src=x onerror=alert(1)>"


def _attrs(tag: str) -> dict[str, str]:
    return {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', tag)}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("whole") / "run"
    root.mkdir()
    write_run(root, host=HOSTILE_HOST)
    write_detections(root, {r: GOOD for r in range(WORLD)})
    out = write_html(analyze(root), root.parent / "report.html")
    return root, out


def test_the_whole_run_section_is_drawn_and_states_what_was_written(chromium, report):
    root, out = report
    page = out.read_text()
    dom = dump_dom(chromium, out)
    body = re.search(r"<body[^>]*>", dom).group(0)  # type: ignore[union-attr]
    assert "data-js-error" not in body
    figures = len(re.findall(r'<div class="plot[^"]*" id="plot-\d+" data-figure=', page))
    assert _attrs(body)["data-plots-ready"] == str(figures)
    section = re.search(r'<section id="whole-run".*?</section>', dom, re.S)
    assert section, "no whole-run section"
    block = re.search(r'<div class="whole-run"[^>]*>', section.group(0)).group(0)  # type: ignore[union-attr]
    a = _attrs(block)
    trace = load_trace(root)
    kept = sorted(set(trace.steps["step"].to_list()) | set(trace.events["step"].to_list()))
    assert a["data-steps"] == a["data-summarised"] == str(STEPS)
    assert a["data-full-detail"] == ",".join(f"{x}-{y}" for x, y in intervals_of(kept))
    assert a["data-bin-steps"] == "1" and a["data-detections"] == "3"
    # the figure is drawn inside the section, one plotly plot
    assert len(re.findall(r'class="plot[^"]*js-plotly-plot"', section.group(0))) == 1
    rows = [_attrs(t) for t in re.findall(r'<tr class="detection"[^>]*>', section.group(0))]
    got = [(r["data-kind"], r["data-rank"], r["data-start"], r["data-stop"]) for r in rows]
    assert got == [
        ("straggler", "1", "101", "163"),
        ("step_time_jump", "", "119", "169"),
        ("straggler", "2", "271", ""),
    ]
    text = html.unescape(re.sub(r"<[^>]+>", " ", section.group(0)))
    assert "still on" in text and f"whole run: {STEPS} steps summarised" in text
    # the host names from the trace are escaped in the table and in the figure's lanes
    assert "<img src=x" not in dom and HOSTILE_HOST not in page


def intervals_of(steps: list[int]) -> list[tuple[int, int]]:
    return intervals(np.array(steps))


def test_no_whole_run_section_without_summaries(tmp_path):
    page = write_html(analyze(DATA / "healthy"), tmp_path / "r.html").read_text()
    assert 'id="whole-run"' not in page
