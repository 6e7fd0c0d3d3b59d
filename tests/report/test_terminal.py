"""The terminal summary opens with the verdict; numbers in units; runs side by side."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rich.console import Console

from syncpace.analysis import analyze
from syncpace.report.terminal import print_analysis

DATA = Path(__file__).resolve().parents[1] / "data"
DEMO = [DATA / "demo" / "trace", DATA / "demo" / "trace-paced"]


def _printed(runs) -> str:
    console = Console(record=True, width=120, color_system=None)
    print_analysis(analyze(runs), console)
    return console.export_text()


def test_the_verdict_comes_first_and_names_who(uplink_truth):
    out = _printed(DEMO)
    first = out.splitlines()[0]
    assert first.startswith("╭─ Verdict: ")
    verdict = out[: out.index("╰")]
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", verdict).split())
    meta = json.loads((DEMO[0] / "rank-00002.meta.json").read_text())
    assert f"rank 2 ({meta['host']}, local rank {meta['local_rank']})" in flat
    busiest = max(uplink_truth(DEMO[0]).items(), key=lambda kv: kv[1])[0]
    assert f"uplink {busiest}" in flat
    assert "do first:" in flat and "how sure:" in flat


def test_runs_of_one_job_side_by_side_without_a_scaling_line():
    out = _printed(DEMO)
    assert "runs side by side" in out and "against baseline" in out
    assert "scaling efficiency" not in out
    assert not re.search(r"[{}\[\]]|\bNone\b|\bnull\b|\d\.\d{4,}", out)
    # each cause once, with each run's cost
    rows = [line for line in out.splitlines() if re.match(r"\d+\. Straggler ·", line)]
    assert len(rows) == 1 and re.search(r"costs \d+% / \d+%", rows[0])


def test_one_run_prints_one_line_and_its_findings():
    out = _printed([DATA / "straggler"])
    assert out.startswith("╭─ Verdict: One cause costs most")
    assert "rank 5 (node1, local rank 1)" in out
    assert "runs side by side" not in out


def test_values_left_out_as_unmeasurable_are_counted_with_the_reason():
    """The busbw plot leaves out what the physics forbids: the terminal says how many
    of how many and why, the same numbers as the run's JSON."""
    analysis = analyze(DEMO[0])
    (left,) = [u for u in analysis.runs[0].unmeasurable if u.what == "busbw" and u.count]
    out = " ".join(_printed(DEMO[0]).split())
    assert (
        f"{left.count} of {left.total} bus bandwidth values left out as unmeasurable: "
        f"{left.reason}" in out
    )
