"""The Perfetto / Chrome trace export."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa

from syncpace.cli.main import main
from syncpace.report.perfetto import LAG_STEPS, export_perfetto, write_perfetto
from syncpace.trace import RankTraceWriter, load_trace

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


def _writer_trace(root: Path, world: int = 4, steps: int = 30, per_step: int = 6) -> Path:
    """A trace from the real writer, one batch per step (as a job's flusher writes)."""
    for rank in range(world):
        w = RankTraceWriter(root, rank, {"world_size": world, "host": f"h{rank}"})
        t = 1_000_000
        for s in range(steps):
            start = t
            for i in range(per_step):
                seq = s * per_step + i
                enter = t + 1000 * ((rank * 7 + seq) % 5)
                w.add_event((rank, s, "0", world, seq, "all_reduce", 4096, "float32", -1,
                             enter, enter + 5000, "future", "completed", None, -1))  # fmt: skip
                t += 10_000
            w.add_step((rank, s, start, t, 0))
            w.flush()
        w.close()
    return root


def _without_ids(events: list[dict]) -> list[str]:
    # slice and flow ids are numbered in the order windows are written; the flows'
    # directions (flow_in / flow_out) still compare
    return sorted(json.dumps({k: v for k, v in e.items() if k not in ("id", "bind_id")},
                             sort_keys=True) for e in events)  # fmt: skip


def test_the_streamed_export_equals_the_in_memory_one_with_bounded_windows(tmp_path):
    run = _writer_trace(tmp_path / "run")
    whole = json.loads(write_perfetto(load_trace(run), tmp_path / "a.json").read_text())
    result = export_perfetto(run, tmp_path / "b.json", chunk_events=20)
    streamed = json.loads((tmp_path / "b.json").read_text())
    assert _without_ids(streamed["traceEvents"]) == _without_ids(whole["traceEvents"])
    ids = [e["id"] for e in streamed["traceEvents"] if e["ph"] == "b"]
    assert len(ids) == len(set(ids)) == 4 * 30 * 6
    # a window holds about chunk_events, and never more than LAG_STEPS + 2 steps of all ranks
    assert result.peak_window_events <= 20 + (LAG_STEPS + 2) * 4 * 6
    assert result.warnings == () and not any(c.lossy for c in result.completeness.values())
    # every wait was matched across ranks inside its window, as in memory
    waits = [e["args"]["wait_ns"] for e in streamed["traceEvents"] if e["ph"] == "b"]
    assert max(waits) == 4000 and min(waits) == 0


def test_the_export_validates_as_the_reader_does(tmp_path):
    run = _writer_trace(tmp_path / "run", world=2, steps=5)
    path = run / "rank-00001.events.arrow"
    table = pa.ipc.open_stream(pa.py_buffer(path.read_bytes())).read_all()
    exit_ns = table.column("exit_ns").to_numpy().copy()
    exit_ns[3] = 5  # before its enter, on a completed call
    table = table.set_column(table.schema.get_field_index("exit_ns"), "exit_ns", pa.array(exit_ns))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    result = export_perfetto(run, tmp_path / "out.json")
    assert result.events == 2 * 5 * 6 - 1
    assert result.completeness[1].events_invalid == 1
    assert any(
        "1 of 30 events left out as invalid (1 exit_ns before enter_ns" in w
        for w in result.warnings
    )
    trace = load_trace(run)
    assert trace.completeness[1].events_invalid == 1 and trace.events.height == result.events


def test_cli_export_states_the_loss(tmp_path, capsys):
    run = _writer_trace(tmp_path / "run", world=2, steps=5)
    (run / "rank-00001.meta.json").write_text(
        (run / "rank-00001.meta.json").read_text().replace('"finished": true', '"finished": false')
    )
    assert main(["export", "--perfetto", str(run), "-o", str(tmp_path / "t.json")]) == 0
    err = capsys.readouterr().err
    assert "rank 1: did not finish" in err
    assert main(["export", "--perfetto", str(run), "-o", str(tmp_path / "no" / "t.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write the export (No such file or directory)" in err[0]
