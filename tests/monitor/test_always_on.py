"""A real job in always-on mode: old segments rotate out, the window around the live
monitor's straggler start is kept, per-step summaries cover every step the job ran.

The job's code is the truth: STEPS steps of one all-reduce each, rank 1 slow from
SLOW_FROM to SLOW_TO.
"""

from __future__ import annotations

import json
from pathlib import Path

from multirank import check, join, start_ranks
from syncpace.analysis import analyze
from syncpace.cli.main import main
from syncpace.trace import load_trace, schema

WORKER = Path(__file__).resolve().parent / "workers" / "straggle.py"
WORLD, STEPS, SLOW_FROM, SLOW_TO = 3, 160, 50, 90
EVERY = 10


def test_rotation_keeps_the_recent_and_the_anomaly_and_summaries_cover_the_run(tmp_path, capsys):
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
    procs = start_ranks(WORKER, WORLD, [str(STEPS), str(SLOW_FROM), str(SLOW_TO)], env=env)
    check(join(procs, timeout=120))
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
