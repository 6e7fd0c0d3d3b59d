"""The report a user can trust, read in a browser: one time origin, human evidence, one
plot per fact, titles no toolbar covers, no local path, a title per run, no figure the
physics forbids; and the scaling page as a page, linked from the report."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

import numpy as np
import pytest

from syncpace.analysis import analyze
from syncpace.demo.pipeline import report_runs
from syncpace.report.browser import dump_dom
from syncpace.report.html import render_html, write_html
from syncpace.report.scaling_page import Measured, write_scaling_page
from syncpace.report.timeaxis import AXIS

DATA = Path(__file__).resolve().parents[1] / "data"
DEMO = [DATA / "demo" / "trace", DATA / "demo" / "trace-paced"]


def _figures(page: str) -> list[dict]:
    specs = re.findall(r'<script type="application/json" id="fig-\d+">(.*?)</script>', page, re.S)
    out = []
    for raw in specs:
        spec = json.loads(raw)
        out.append(json.loads(spec) if isinstance(spec, str) else spec)
    return out


def _values(axis_data) -> list[float]:
    if isinstance(axis_data, dict) and "bdata" in axis_data:
        return np.frombuffer(base64.b64decode(axis_data["bdata"]), axis_data["dtype"]).tolist()
    return [v for v in axis_data or [] if isinstance(v, (int, float))]


def _title(axis: dict) -> str:
    title = axis.get("title") or {}
    return title.get("text", "") if isinstance(title, dict) else str(title)


def _axes(spec: dict, letter: str) -> list[dict]:
    layout = spec["layout"]
    return [v for k, v in layout.items() if re.fullmatch(rf"{letter}axis\d*", k)]


def _body(dom: str) -> str:
    match = re.search(r"<body[^>]*>", dom)
    assert match
    return match.group(0)


def _attr(dom: str, name: str) -> str | None:
    match = re.search(rf'{name}="([^"]*)"', _body(dom))
    return match.group(1) if match else None


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("trust")
    (out / "scaling.html").write_text("<!DOCTYPE html><title>s</title>")  # a page beside it
    page = report_runs(DEMO, out)[1]
    return page, page.read_text()


def test_every_time_axis_has_one_origin(report):
    """Point 6: seconds since the run's first collective, on every axis of time."""
    titles = [_title(a) for spec in _figures(report[1]) for a in _axes(spec, "x")]
    timed = [t for t in titles if "time" in t and "(s)" in t or "time from" in t]
    assert timed and set(timed) == {AXIS}, sorted(set(timed))


def test_no_figure_the_physics_forbids_is_plotted(report):
    """Point 5: the busbw plot stays at or below the 100 Mbit/s links, and says what it
    left out and why."""
    rate_bps = max(
        link["rate_bps"]
        for link in json.loads((DEMO[0] / "fabric.json").read_text())["links"]
        if link["kind"] == "host"
    )
    busbw = [
        s for s in _figures(report[1]) if _title(s["layout"].get("yaxis", {})).startswith("busbw")
    ]
    overview = next(s for s in busbw if "message size" in _title(s["layout"]["xaxis"]))
    unit = _title(overview["layout"]["yaxis"])
    assert unit == "busbw (Mbit/s)"
    points = [v for t in overview["data"] for v in _values(t.get("y"))]
    assert points and max(points) <= rate_bps / 1e6
    note = overview["layout"]["meta"]["note"]
    assert "left out" in note and "faster than the 100 Mbit/s host link rate allows" in note


def test_page_has_a_title_per_run_and_no_local_path(report):
    path, page = report
    title = re.search(r"<title>(.*?)</title>", page).group(1)
    assert title.startswith("trace, trace-paced — 20") and title.endswith("syncpace report")
    # relative paths may climb (../../data/demo/trace); none starts at the root
    for absolute in (DATA, path.parent):
        assert not re.search(rf"(?<!\.\.){re.escape(str(absolute))}", page), absolute


def test_evidence_reads_as_words_and_each_figure_once(report):
    """No dictionary, no row of dashes, the same figures never under three names."""
    page = report[1]
    cards = re.findall(r'<table class="t ev">(.*?)</table>', page, re.S)
    assert cards
    for card in cards:
        rows = re.findall(r"<tr><th>(.*?)</th>(.*?)</tr>", card, re.S)
        values = [tuple(re.findall(r"<td>(.*?)</td>", cells)) for _, cells in rows]
        assert len(values) == len(set(values)), "the same figures in two rows"
        for label, cells in rows:
            text = html.unescape(re.sub(r"<[^>]+>", "", cells))
            assert "name:" not in text and "description:" not in text, label
            assert "—" not in text, label
    assert "replayed" in page and "per iteration" in page


def test_one_plot_per_fact(report):
    figures = [json.dumps(s, sort_keys=True) for s in _figures(report[1])]
    assert len(figures) == len(set(figures))
    # the typical iteration's swimlanes are drawn once, in the timeline
    lanes = [s for s in _figures(report[1]) if "rank (host)" in _title(s["layout"]["yaxis"])]
    assert len([s for s in lanes if s["data"] and s["data"][0].get("orientation") == "h"]) == 4


def test_first_screen_and_titles_in_chromium(chromium, report):
    dom = dump_dom(chromium, report[0])
    plots = int(_attr(dom, "data-plots-ready") or -1)
    assert plots == len(_figures(report[1])) > 0
    assert _attr(dom, "data-js-error") is None
    # the toolbar is there, over no title: titles are headings above the plots
    assert int(_attr(dom, "data-modebars") or 0) == plots
    assert _attr(dom, "data-title-overlaps") == ""
    assert len(re.findall(r'<h4 class="fig-title">', dom)) == plots
    first = dom[: dom.index('id="runs"')]
    assert 'href="scaling.html"' in first  # the scaling page, linked from the verdict
    assert 0 < int(_attr(dom, "data-verdict-bottom")) <= 900


ROWS = [
    {
        "nodes": n,
        "world_size": n,
        "pacing": False,
        "pacing_on": "off",
        "iteration_ms": ms,
        "throughput": 32 * n / (ms / 1e3),
        "speedup": (n / ms) / (4 / 500),
        "cv": 0.05,
        "efficiency": (n / ms) / (4 / 500) / (n / 4),
    }
    for n, ms in ((4, 500.0), (8, 520.0), (16, 560.0))
]


def test_scaling_page_is_a_page(chromium, tmp_path):
    """What was simulated, the efficiency, the measured point beside the predicted one
    with its error, axes that say their scale; checked in the browser."""
    page = write_scaling_page(
        ROWS,
        tmp_path / "scaling.html",
        name="the demo job",
        simulated=["The demo's job at 4, 8, 16 nodes.", "Calibrated from the traced run."],
        measured=Measured(4, 480.0, "trace"),
        report="report.html",
    )
    text = page.read_text()
    assert "<title>the demo job — simulated scaling study — syncpace</title>" in text
    dom = dump_dom(chromium, page)
    assert _attr(dom, "data-js-error") is None
    assert _attr(dom, "data-plots-ready") == "2" and _attr(dom, "data-title-overlaps") == ""
    body = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", dom, flags=re.S)
    words = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())
    assert "What was simulated The demo's job at 4, 8, 16 nodes." in words
    assert "At 16 nodes the simulated job runs at 89% weak-scaling efficiency" in words
    check = re.search(r"<p class=\"check\" data-error=\"([^\"]*)\"", dom)
    assert check and float(check.group(1)) == pytest.approx(500 / 480 - 1, abs=1e-4)
    assert "took 480 ms per iteration; the simulation predicts 500 ms (+4.2%)" in words
    assert 'href="report.html"' in dom
    for spec in _figures(text):
        for axis in _axes(spec, "x") + _axes(spec, "y"):
            title = _title(axis)
            assert ("log scale" in title) == (axis.get("type") == "log"), title
    through = _figures(text)[0]
    measured = [t for t in through["data"] if t.get("name", "").startswith("measured")]
    assert measured and _values(measured[0]["x"]) == [4]


def test_report_without_a_directory_names_runs_by_their_short_names():
    page = render_html(analyze(DEMO))
    assert str(DATA) not in page
    assert "syncpace export --perfetto trace -o trace.json" in page


def test_a_report_beside_its_runs_shows_them_by_relative_path(tmp_path):
    runs = []
    for source in DEMO:
        (tmp_path / source.name).symlink_to(source, target_is_directory=True)
        runs.append(tmp_path / source.name)
    page = write_html(
        analyze(runs),
        tmp_path / "report.html",
    ).read_text()
    assert "<th>directory</th><td>trace</td><td>trace-paced</td>" in page
    assert str(tmp_path) not in page


def _page_of(figure_html: str, scripts: list[str]) -> str:
    from plotly.offline import get_plotlyjs

    from syncpace.report.html import _DRAW, _ERROR_HOOK

    return (
        f"<!DOCTYPE html><html><head><script>{_ERROR_HOOK}</script>"
        f"<script>{get_plotlyjs()}</script></head><body>{figure_html}{''.join(scripts)}"
        f"<script>{_DRAW}</script></body></html>"
    )


def test_the_page_sees_a_toolbar_over_a_title(chromium, tmp_path):
    """The overlap check can fail: subplot titles moved down into the toolbar's strip
    (a top margin of 36 px) are reported, the margin the report gives them is not."""
    from plotly.subplots import make_subplots

    from syncpace.report.html import _Figures

    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("left", "a subplot title that runs to the right edge")
    )
    fig.add_scatter(x=[1, 2], y=[1, 2], row=1, col=1)
    fig.add_scatter(x=[1, 2], y=[2, 1], row=1, col=2)
    figures = _Figures()
    placed = figures.place(fig)
    clear = tmp_path / "clear.html"
    clear.write_text(_page_of(placed, figures.scripts))
    assert _attr(dump_dom(chromium, clear), "data-title-overlaps") == ""
    covered = tmp_path / "covered.html"
    squeezed = [s.replace('"t":56', '"t":36') for s in figures.scripts]
    assert squeezed != figures.scripts
    covered.write_text(_page_of(placed, squeezed))
    assert _attr(dump_dom(chromium, covered), "data-title-overlaps") == "plot-0"
