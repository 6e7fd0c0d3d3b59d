"""The Perfetto / Chrome trace export."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from syncpace.report.perfetto import write_perfetto
from syncpace.trace import load_trace

DATA = Path(__file__).resolve().parents[1] / "data"


def test_one_track_per_rank_with_steps_and_collectives(tmp_path: Path) -> None:
    trace = load_trace(DATA / "fabric_contention")
    out = write_perfetto(trace, tmp_path / "trace.json")
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(names) == list(range(8))
    assert names[5].startswith("rank 5 (node1")
    phases = Counter(e["ph"] for e in events)
    assert phases["X"] == trace.steps.height
    assert phases["b"] == phases["e"] == trace.events.height
    # ts/dur in microseconds from the start: step 3 of rank 2
    row = trace.steps.filter((trace.steps["rank"] == 2) & (trace.steps["step"] == 3)).row(
        0, named=True
    )
    origin = min(int(trace.steps["start_ns"].min()), int(trace.events["enter_ns"].min()))
    step = next(e for e in events if e["ph"] == "X" and e["pid"] == 2 and e["name"] == "step 3")
    assert step["ts"] == (row["start_ns"] - origin) / 1e3
    assert step["dur"] == (row["end_ns"] - row["start_ns"]) / 1e3
    # every async slice ends after it begins, under the same id
    begins = {e["id"]: e for e in events if e["ph"] == "b"}
    for e in events:
        if e["ph"] == "e":
            assert e["ts"] >= begins[e["id"]]["ts"]
            assert e["pid"] == begins[e["id"]]["pid"]
    groups = {e["args"]["group"] for e in begins.values()}
    assert groups == {"0", "node0-tp", "node1-tp"}
