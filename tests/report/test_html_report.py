"""The HTML report: self-contained, every trace string escaped, and — read in headless
Chromium as a person would open it — the verdict on the first screen, one card per
cause, evidence without raw JSON, a picture per finding, no scaling plot for runs of
one world size, no script errors."""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest

from planted import SCENARIOS, generate
from syncpace.analysis import analyze
from syncpace.report.browser import FIRST_SCREEN, dump_dom, find_chromium
from syncpace.report.html import render_html, write_html

DATA = Path(__file__).resolve().parents[1] / "data"
DEMO = [DATA / "demo" / "trace", DATA / "demo" / "trace-paced"]
HOSTILE = '<script>alert("x")</script>'
HOSTILE_2 = "n&de\"'<img src=x onerror=alert(1)>"
#: What no table cell may show: JSON or Python reprs, nulls.
RAW = re.compile(r"[{}\[\]]|\bnull\b|\bNone\b|\bnan\b|\binf\b")


def raw(text: str) -> bool:
    """JSON, a repr or a null in ``text``, or a number with more than three significant
    digits after rounding was due (317.7751, 0.7702: not 0.0625, not 1,234)."""
    decimals = re.findall(r"\d[\d,]*\.\d+", text)
    digits = [d.replace(",", "").replace(".", "").lstrip("0") for d in decimals]
    return bool(RAW.search(text)) or any(len(d) > 3 for d in digits)


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


def _attr(dom: str, name: str) -> str | None:
    match = re.search(rf'{name}="([^"]*)"', _body(dom))
    return match.group(1) if match else None


def _figure_count(page: str) -> int:
    return len(re.findall(r'<div class="plot[^"]*" id="plot-\d+" data-figure=', page))


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def _cells(dom: str) -> list[str]:
    """The text of every cell of every table of the page."""
    tables = re.findall(r"<table[\s>].*?</table>", dom, re.S)
    return [
        _text(c).strip()
        for t in tables
        for c in re.findall(r"<t[dh](?:\s[^>]*)?>(.*?)</t[dh]>", t, re.S)
    ]


def _section(dom: str, name: str) -> str:
    match = re.search(rf'<section id="{name}".*?</section>', dom, re.S)
    assert match, f"no {name} section"
    return match.group(0)


def _rendered(chromium: str, dom: str, page: str) -> None:
    """Every figure drawn, no script error."""
    expected = _figure_count(page)
    assert _attr(dom, "data-js-error") is None, _attr(dom, "data-js-error")
    assert _attr(dom, "data-plots-ready") == str(expected)
    assert len(re.findall(r'class="plot[^"]*js-plotly-plot"', dom)) == expected
    assert dom.count('class="plot-container plotly"') == expected


@pytest.mark.parametrize("runs", [["healthy"], ["straggler", "healthy"]])
def test_report_renders_in_headless_chromium(chromium: str, tmp_path: Path, runs) -> None:
    out = write_html(analyze([DATA / r for r in runs]), tmp_path / "report.html")
    page = out.read_text()
    assert _figure_count(page) >= 5
    _rendered(chromium, dump_dom(chromium, out), page)


def test_hostile_report_renders_without_script_errors(chromium: str, tmp_path: Path, hostile_run):
    out = write_html(analyze(hostile_run), tmp_path / "hostile.html")
    dom = dump_dom(chromium, out)
    assert "data-js-error" not in _body(dom)
    assert "data-plots-ready" in _body(dom)
    assert "<img src=" not in dom


@pytest.fixture(scope="module")
def demo_report(demo_runs_report) -> tuple[Path, str]:
    """The report of the demo's two runs (traced, paced), as ``syncpace demo`` writes it."""
    _, out = demo_runs_report
    return out, out.read_text()


@pytest.fixture(scope="module")
def demo_dom(demo_report) -> str:
    binary = find_chromium()
    if binary is None:  # as the chromium fixture (tests/conftest.py), for a module's DOM
        if os.environ.get("CI"):
            pytest.fail("CI is set but chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium); CI runs this test")
    return dump_dom(binary, demo_report[0])


def test_demo_report_draws_every_plot(chromium, demo_report, demo_dom):
    _rendered(chromium, demo_dom, demo_report[1])


def test_demo_verdict_on_the_first_screen_names_rank_host_and_uplink(demo_dom, uplink_truth):
    bottom = _attr(demo_dom, "data-verdict-bottom")
    assert bottom is not None and 0 < int(bottom) <= FIRST_SCREEN[1]
    verdict = " ".join(_text(_section(demo_dom, "verdict")).split())
    meta = json.loads((DEMO[0] / "rank-00002.meta.json").read_text())
    assert f"rank 2 ({meta['host']}, local rank {meta['local_rank']})" in verdict
    busiest = max(uplink_truth(DEMO[0]).items(), key=lambda kv: kv[1])[0]
    assert f"uplink {busiest}" in verdict
    assert "Do first:" in verdict and "How sure:" in verdict
    assert verdict.index("Verdict") < verdict.index("rank 2")
    # the verdict is the first thing in the body after the title
    assert (
        demo_dom.index('id="verdict"')
        < demo_dom.index('id="runs"')
        < demo_dom.index('id="findings"')
    )


def test_demo_findings_are_one_card_per_cause_with_a_column_per_run(demo_dom):
    cards = re.findall(r'<div class="finding [^"]*" id="finding-\d+" data-mode="([^"]+)"', demo_dom)
    modes = {f.mode for f in analyze(DEMO).findings}
    assert sorted(cards) == sorted(modes)  # each cause once, not once per run
    for mode in cards:
        card = re.search(
            rf'id="finding-\d+" data-mode="{mode}".*?(?=<div class="finding |</section>)',
            demo_dom,
            re.S,
        )
        assert card is not None
        header = re.search(r"<thead>(.*?)</thead>", card.group(0), re.S)
        assert header is not None
        columns = [_text(c).strip() for c in re.findall(r"<th>(.*?)</th>", header.group(1))]
        assert columns == ["", "trace", "trace-paced"]
        # its own plot, or the link to the same plot drawn for an earlier card
        plotted = "js-plotly-plot" in card.group(0) or 'class="same-plot"' in card.group(0)
        assert plotted, f"{mode} has no plot"


def test_demo_tables_hold_no_raw_json(demo_dom):
    cells = _cells(demo_dom)
    assert len(cells) > 50
    assert [c for c in cells if raw(c)] == []


def test_no_scaling_plot_for_runs_of_one_world_size(demo_dom, tmp_path):
    assert "Scaling across world sizes" not in demo_dom
    assert "strong speedup" not in demo_dom
    assert "2 runs of one world size" in _text(_section(demo_dom, "runs"))
    # the same job at two world sizes is a scaling study and gets the curve
    base = SCENARIOS["healthy"].replace(steps=10)
    runs = [generate(base.replace(nodes=n, seed=n), tmp_path / f"n{n}") for n in (1, 2)]
    page = render_html(analyze(runs))
    assert "Scaling across world sizes" in page and "strong speedup" in page


def test_demo_timeline_and_pointer_to_the_full_trace(demo_dom, demo_report):
    timeline = _section(demo_dom, "timeline")
    assert len(re.findall(r"js-plotly-plot", timeline)) == 4  # slowest and typical, per run
    assert "slowest iteration" in timeline and "typical iteration" in timeline
    # the run directory relative to the report's (no absolute local path in the page)
    shown = os.path.relpath(DEMO[0], demo_report[0].parent)
    assert f"syncpace export --perfetto {shown} -o trace.json" in _text(timeline)


def test_demo_report_size(demo_report):
    """plotly.js (4.8 MB) is most of it; the demo's figures stay light."""
    size = demo_report[0].stat().st_size
    assert 4_000_000 < size < 6_500_000, size


def test_reports_written_together_can_share_one_plotly_bundle(chromium, tmp_path):
    a = write_html(analyze(DATA / "healthy"), tmp_path / "a.html", shared_plotly=True)
    b = write_html(analyze(DATA / "straggler"), tmp_path / "b.html", shared_plotly=True)
    bundles = list(tmp_path.glob("plotly-*.min.js"))
    assert len(bundles) == 1 and bundles[0].stat().st_size > 3_000_000
    for page in (a, b):
        text = page.read_text()
        assert f'<script src="{bundles[0].name}"></script>' in text
        assert page.stat().st_size < 1_000_000  # the figures, without plotly.js
    _rendered(chromium, dump_dom(chromium, b), b.read_text())
