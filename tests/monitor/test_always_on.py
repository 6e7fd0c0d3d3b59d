"""A real job in always-on mode: old segments rotate out, the window around the live
monitor's straggler start is kept, per-step summaries cover every step the job ran.

The job's code is the truth: STEPS steps of one all-reduce each, rank 1 slow from
SLOW_FROM to SLOW_TO.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from multirank import run_ranks
from syncpace.analysis import analyze
from syncpace.analysis.wholerun import intervals
from syncpace.capture.monitor import LAG_STEPS
from syncpace.cli.main import main
from syncpace.monitor import OnlineDetector
from syncpace.report.browser import dump_dom
from syncpace.trace import load_trace, schema

pytestmark = pytest.mark.multirank

WORKER = Path(__file__).resolve().parent / "workers" / "straggle.py"
WORLD, STEPS, SLOW_FROM, SLOW_TO = 3, 160, 50, 90
EVERY = 10


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    tmp_path = tmp_path_factory.mktemp("always-on")
    env = {
        "TRACE_DIR": str(tmp_path),
        "SYNCPACE_CONTINUOUS": "1",
        "SYNCPACE_SEGMENT_S": "0.3",
        "SYNCPACE_KEEP_S": "1.0",
        "SYNCPACE_ANOMALY_KEEP_S": "0.8",
        "SYNCPACE_FLUSH_INTERVAL_S": "0.1",
        "SYNCPACE_MONITOR_EVERY": str(EVERY),
        "SYNCPACE_HOST_SAMPLER": "off",
    }
    run_ranks(WORKER, WORLD, [str(STEPS), str(SLOW_FROM), str(SLOW_TO)], timeout=120, env=env)
    return tmp_path


def test_rotation_keeps_the_recent_and_the_anomaly_and_summaries_cover_the_run(job, capsys):
    tmp_path = job
    trace = load_trace(tmp_path)
    for rank in range(WORLD):
        seg = trace.meta[rank]["segments"]
        assert seg["written"] >= 5 and seg["removed"] >= 1, seg
        assert not trace.completeness[rank].lossy
        assert trace.completeness[rank].events_rotated == seg["removed_events"] > 0
        pins = [p for p in seg["pins"] if p["reason"] == "straggler start"]
        assert len(pins) == 1 and SLOW_FROM <= pins[0]["step"] <= SLOW_FROM + 3 * EVERY, seg
    # the job's steps, every one of them, in the summaries: one all-reduce each
    s = trace.summaries.filter(trace.summaries["step"].is_between(1, STEPS - 2))
    assert s.height == WORLD * (STEPS - 2)
    assert (s["calls"] == 1).all() and (s["bytes"] == 256 * 4).all()
    # full detail: the last steps, and the pinned window around the straggler's start
    kept = set(trace.events["step"].unique().to_list())
    pin_step = trace.meta[0]["segments"]["pins"][0]["step"]
    assert STEPS - 1 in kept
    # The window is in seconds around the moment of detection: the steps of its segments
    # (a step split across a kept and a removed segment is left out whole).
    near = {s for s in kept if pin_step - 5 <= s <= pin_step + 5}
    assert near, (pin_step, sorted(kept))
    removed = trace.meta[0]["segments"]["removed_steps"]
    assert removed[0][0] <= 1, removed
    assert any(max(near) < a and b < STEPS - 1 for a, b in removed), removed  # a gap after
    # and the kept steps analyse: rank 1 is late in those of the slow phase
    analysis = analyze(tmp_path)
    assert analysis is not None
    assert main(["trace-info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"per-step summaries of {STEPS} steps" in out
    assert "kept in full around: " in out and f"straggler start at step {pin_step}" in out
    export = tmp_path / "perfetto.json"
    assert main(["export", "--perfetto", str(tmp_path), "-o", str(export)]) == 0
    exported = json.loads(export.read_text())["traceEvents"]
    calls = [e for e in exported if e.get("cat") == "collective"]
    assert len(calls) >= trace.events.height  # every kept call (and those of partial steps)
    files = sorted(p.name for p in tmp_path.glob(f"{schema.rank_stem(0)}.events*.arrow"))
    assert files and files[0] != f"{schema.rank_stem(0)}{schema.EVENTS_SUFFIX}"


def test_the_report_shows_the_whole_run_the_detection_and_the_kept_detail(job, chromium, capsys):
    """The job's code is the truth: STEPS steps ran; rank 1 was slow from SLOW_FROM to
    SLOW_TO - 1; the full-detail steps are the ones the reader kept."""
    out = job.parent / "report.html"
    assert main(["report", str(job), "-o", str(out)]) == 0
    dom = dump_dom(chromium, out)
    body = re.search(r"<body[^>]*>", dom).group(0)  # type: ignore[union-attr]
    assert "data-js-error" not in body and "data-plots-ready" in body
    section = re.search(r'<section id="whole-run".*?</section>', dom, re.S)
    assert section, "no whole-run section"
    block = dict(re.findall(r'([\w-]+)="([^"]*)"', re.search(r'<div class="whole-run"[^>]*>',
                 section.group(0)).group(0)))  # type: ignore[union-attr]  # fmt: skip
    assert int(block["data-summarised"]) == STEPS
    assert "js-plotly-plot" in section.group(0)
    # the full-detail ranges are the steps the reader kept in full
    trace = load_trace(job)
    kept = sorted(set(trace.steps["step"].to_list()) | set(trace.events["step"].to_list()))
    expected = ",".join(f"{a}-{b}" for a, b in intervals(np.array(kept)))
    assert html.unescape(block["data-full-detail"]) == expected
    assert len(expected.split(",")) >= 2  # the window around the detection and the recent end
    # the straggler's interval covers the planted steps, within the documented delay
    rows = [dict(re.findall(r'([\w-]+)="([^"]*)"', t))
            for t in re.findall(r'<tr class="detection"[^>]*>', section.group(0))]  # fmt: skip
    stragglers = [r for r in rows if r["data-kind"] == "straggler"]
    assert [r["data-rank"] for r in stragglers] == ["1"], rows
    detector = OnlineDetector(WORLD)
    bound = EVERY + LAG_STEPS + math.ceil(detector.h / (1 - detector.k))
    start, stop = int(stragglers[0]["data-start"]), int(stragglers[0]["data-stop"])
    detected = int(stragglers[0]["data-detected"])
    # the change point the detector named: the step after its statistic last stood at
    # zero, so a step or two early where rank 1 was last by chance just before
    assert SLOW_FROM - 3 <= start <= SLOW_FROM + 3
    assert start <= detected <= SLOW_FROM + bound
    assert SLOW_TO <= stop <= SLOW_TO + bound  # its end, detected after the last slow step
    # and the terminal says the same in one line
    assert main(["diagnose", str(job)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if "whole run:" in x)
    assert f"whole run: {STEPS} steps summarised (steps 0–{STEPS - 1}, {WORLD} ranks)" in line
    assert "straggler: rank 1 " in line and f"from step {start} (detected at {detected})" in line
    assert f"over at step {stop}" in line
