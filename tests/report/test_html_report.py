"""The HTML report: self-contained, every trace string escaped, and it renders."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from planted import SCENARIOS, generate
from syncpace.analysis import analyze
from syncpace.report.browser import dump_dom
from syncpace.report.html import render_html, write_html

DATA = Path(__file__).resolve().parents[1] / "data"
HOSTILE = '<script>alert("x")</script>'
HOSTILE_2 = "n&de\"'<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> Path:
    scenario = SCENARIOS["straggler"].replace(
        steps=12, hosts=(HOSTILE, HOSTILE_2), intra_bytes=1 << 20
    )
    return generate(scenario, tmp_path_factory.mktemp("hostile") / "run")


def test_every_trace_string_is_escaped(hostile_run: Path) -> None:
    page = render_html(analyze(hostile_run))
    assert HOSTILE not in page
    assert "<img src=x" not in page
    assert "onerror=alert(1)>" not in page
    # the only </script> tags are the page's own: one per <script> element
    assert page.count("</script>") == page.count("<script")
    # shown escaped: in the findings (HTML) and in the figures' labels (JSON in a script)
    assert html.escape(HOSTILE_2) in page
    assert "\\u0026lt;script\\u0026gt;alert" in page


def test_report_is_self_contained() -> None:
    page = render_html(analyze([DATA / "healthy", DATA / "straggler"]))
    assert not re.search(r"<script[^>]+src=", page)  # plotly.js is inline, no CDN
    assert not re.search(r"<link[^>]+href=", page)
    assert "Plotly" in page and "plotly.js" in page
    assert "flat topology" in page


def _body(dom: str) -> str:
    """The <body> start tag, where the page records errors and finished plots."""
    match = re.search(r"<body[^>]*>", dom)
    assert match, "no <body> in the DOM"
    return match.group(0)


def _figure_count(page: str) -> int:
    return len(re.findall(r'<div class="plot" id="plot-\d+"></div>', page))


@pytest.mark.parametrize("runs", [["healthy"], ["straggler", "healthy"]])
def test_report_renders_in_headless_chromium(chromium: str, tmp_path: Path, runs) -> None:
    out = write_html(analyze([DATA / r for r in runs]), tmp_path / "report.html")
    expected = _figure_count(out.read_text())
    assert expected >= 5
    dom = dump_dom(chromium, out)
    assert "data-js-error" not in _body(dom)
    assert f'data-plots-ready="{expected}"' in _body(dom)
    plots = re.findall(r'class="plot js-plotly-plot" id="plot-\d+"', dom)
    assert len(plots) == expected
    assert dom.count('class="plot-container plotly"') == expected


def test_hostile_report_renders_without_script_errors(chromium: str, tmp_path: Path, hostile_run):
    out = write_html(analyze(hostile_run), tmp_path / "hostile.html")
    dom = dump_dom(chromium, out)
    assert "data-js-error" not in _body(dom)
    assert "data-plots-ready" in _body(dom)
    assert "<img src=" not in dom
