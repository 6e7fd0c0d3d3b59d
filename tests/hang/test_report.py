"""A hang is the first thing the terminal summary and the HTML report show."""

from __future__ import annotations

from builders import LOADER, USER, healthy_prefix, inflight, stall, trace

from syncpace.analysis import analyze
from syncpace.console import make_console
from syncpace.report.hang import hang_html, print_hang, stopped
from syncpace.report.html import render_html
from syncpace.report.terminal import print_analysis


def hung_analysis():
    others = {r: stall(r, in_flight=[inflight(5, 5.0 + r * 0.01)]) for r in (0, 1, 3)}
    culprit = stall(2, kind="no_progress", frames=(USER, LOADER))
    return analyze(trace(healthy_prefix(), {**others, 2: culprit}))


def test_terminal_shows_the_hang_before_anything_else(tmp_path):
    analysis = hung_analysis()
    path = tmp_path / "out.txt"
    with path.open("w") as fh:
        console = make_console(file=fh, width=160)
        print_analysis(analysis, console)
    out = path.read_text()
    first = out.splitlines()[0]
    assert first.startswith("HANG at all_reduce seq 5 of group 0, 4096 B float32")
    assert "3 of 4 ranks wait since 11:53:25 UTC" in first
    assert out.index("HANG at") < out.index("run: 4 ranks (torch)")
    assert "stack of rank 2 (culprit: stuck, stall record):" in out
    assert "> __next__ (/env/site-packages/torch/utils/data/dataloader.py:733)" in out
    assert "train_step (/job/train.py:88)    batch = next(loader)" in out
    assert "missing: stuck" in out and "ranks 0,1,3" in out


def test_html_report_opens_with_the_hang_section():
    analysis = hung_analysis()
    page = render_html(analysis)
    assert page.index("<section class='hang' id='hang'>") < page.index("<h2>Findings</h2>")
    section = hang_html(stopped(analysis.findings))
    assert "HANG at all_reduce seq 5 of group 0" in section
    assert "<pre class='stack'>" in section and "train_step (/job/train.py:88)" in section


def test_no_hang_no_section():
    analysis = analyze(trace(healthy_prefix(), finished=range(4)))
    assert stopped(analysis.findings) is None
    assert "id='hang'" not in render_html(analysis)


def test_print_hang_escapes_markup(tmp_path):
    finding = stopped(hung_analysis().findings)
    path = tmp_path / "out.txt"
    with path.open("w") as fh:
        print_hang(finding, make_console(file=fh, width=200))
    assert "[bold" not in path.read_text()
