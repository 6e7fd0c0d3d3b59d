"""The crash journal on its own: round trips, the ring, torn records, recovery."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from syncpace.trace import RankTraceWriter, load_trace
from syncpace.trace import journal as jr
from syncpace.trace.columns import complete_event


def event(i: int, *, status: str = "completed", error: str | None = None) -> tuple:
    return (
        0,
        i // 4,
        "g7",
        2,
        i,
        "all_reduce",
        64 * (i + 1),
        "bfloat16",
        -1,
        1000 * i,
        1000 * i + 500,
        "future",
        status,
        error,
        -1,
    )


def crashed(writer: RankTraceWriter, tmp: Path) -> Path:
    """A copy of ``writer``'s directory as a crash leaves it: whatever is on disk now,
    the journal included, and the metadata still unfinished."""
    out = tmp / "crashed"
    shutil.copytree(writer.dir, out)
    return out


def test_events_and_steps_round_trip_through_the_journal(tmp_path):
    w = RankTraceWriter(tmp_path / "run", 0, {"world_size": 2, "host": "h"}, journal_slots=256)
    rows = [event(i) for i in range(10)]
    rows[3] = event(3, status="failed", error="RuntimeError: peer reset")
    for row in rows:
        w.add_event(row)
    w.add_step((0, 0, 10, 3000, 7))
    w.close()
    assert not (tmp_path / "run" / "rank-00000.journal").exists()  # a clean close removes it
    trace = load_trace(tmp_path / "run")
    assert trace.events.rows() == [complete_event(row) for row in rows]  # no device times
    assert trace.steps.rows() == [(0, 0, 10, 3000, 7, 0, -1)]


def test_a_dead_rank_is_recovered_exactly_once_across_streams_and_journal(tmp_path):
    """Some records reached the Arrow streams, the rest only the journal: the reader
    joins them without a gap or a duplicate, and aligns the journal's times with the
    rank's last clock offset."""
    meta = {"world_size": 2, "host": "h", "clock": {"offset_ns": 5}}
    w = RankTraceWriter(
        tmp_path / "run", 0, meta, journal_slots=256, flush_interval_s=3600, offset_ns=lambda: 5
    )
    for i in range(30):
        w.add_event(event(i))
    w.flush()  # 0..29 in the streams
    for i in range(30, 45):
        w.add_event(event(i))  # 30..44 in the journal only
    w.add_step((0, 0, 0, 9000, 0))
    trace = load_trace(crashed(w, tmp_path))
    w.close()
    assert trace.events["seq"].to_list() == list(range(45))
    assert trace.events["enter_ns"].to_list() == [1000 * i + 5 for i in range(45)]
    assert trace.steps.rows() == [(0, 0, 5, 9005, 0, 0, -1)]
    assert any("15 events and 1 steps recovered" in x for x in trace.warnings)


def test_the_ring_is_reused_once_flushed_and_overflows_into_memory(tmp_path):
    w = RankTraceWriter(
        tmp_path / "run",
        0,
        {"world_size": 2, "host": "h"},
        journal_slots=256,
        flush_interval_s=3600,
    )
    for i in range(1000):
        w.add_event(event(i))
        if i % 200 == 199:
            w.flush()  # the ring's slots are free again
    assert w.journal.overflow == 0
    for i in range(1000, 1300):  # 300 > 256 slots without a flush
        w.add_event(event(i))
    assert w.journal.overflow == 300 - 256
    w.close()
    trace = load_trace(tmp_path / "run")
    assert sorted(trace.events["seq"].to_list()) == list(range(1300))
    assert trace.meta[0]["journal_overflow"] == 44


def test_calls_in_flight_read_back_as_pending(tmp_path):
    w = RankTraceWriter(tmp_path / "run", 0, {"world_size": 2, "host": "h"}, journal_slots=256)
    done = w.begin(event(0)[:10])
    hung = w.begin(event(1)[:10])
    released = w.begin(event(2)[:10])
    w.add_event(event(0), done)
    w.release(released)
    trace = load_trace(crashed(w, tmp_path))
    w.close()
    rows = trace.events.sort("seq").select("seq", "status", "exit_ns", "bytes").rows()
    assert rows == [(0, "completed", 500, 64), (1, "pending", -1, 128)]
    assert hung & 0xFFFF != jr.NO_SLOT


def test_a_torn_last_record_is_left_out(tmp_path):
    """A record whose tail does not match its head (the rank died packing it) and a
    record damaged in its middle after commit both stay out, the rest reads."""
    w = RankTraceWriter(
        tmp_path / "run",
        0,
        {"world_size": 2, "host": "h"},
        journal_slots=256,
        flush_interval_s=3600,
    )
    for i in range(5):
        w.add_event(event(i))
    out = crashed(w, tmp_path)
    w.close()
    path = out / "rank-00000.journal"
    data = bytearray(path.read_bytes())
    # records are numbered from 1: the five took 1..5, and 6 is the torn one
    torn = jr.HEADER_BYTES + 6 * jr.RECORD.size
    data[torn : torn + 8] = struct.pack("<q", 6)  # its head written, body and tail not
    # and record 3 damaged after it was complete: its tail no longer matches
    three = jr.HEADER_BYTES + 3 * jr.RECORD.size + jr.RECORD.size - 8
    data[three : three + 8] = struct.pack("<q", 0)
    path.write_bytes(bytes(data))
    trace = load_trace(out)
    assert trace.events["seq"].to_list() == [0, 1, 3, 4]
    assert any("2 torn records left out" in x for x in trace.warnings)


def test_a_closed_or_foreign_journal_is_ignored(tmp_path):
    w = RankTraceWriter(
        tmp_path / "run",
        0,
        {"world_size": 2, "host": "h"},
        journal_slots=256,
        flush_interval_s=3600,
    )
    w.add_event(event(0))
    out = crashed(w, tmp_path)
    w.close()
    path = out / "rank-00000.journal"
    data = bytearray(path.read_bytes())
    data[:8] = b"NOTMINE!"
    path.write_bytes(bytes(data))
    trace = load_trace(out)  # the journal is not recognised: the streams alone
    assert trace.events.height == 0
    assert not any("recovered" in x for x in trace.warnings)


def test_records_match_the_numpy_view_field_by_field():
    buf = bytearray(jr.RECORD.size)
    values = (
        7,
        jr.EVENT,
        2,
        3,
        1,
        9,
        4,
        5,
        6,
        10,
        20,
        15,
        8,
        -1,
        11,
        12,
        13,
        30,
        40,
        7 ^ jr.COMMIT,
    )
    jr.RECORD.pack_into(buf, 0, *values)
    rec = np.frombuffer(bytes(buf), jr.RECORD_DTYPE)[0]
    names = [n for n in jr.RECORD_DTYPE.names if n != "pad"]
    assert tuple(int(rec[n]) for n in names) == values


def test_meta_names_the_journal(tmp_path):
    w = RankTraceWriter(tmp_path, 0, {"world_size": 2, "host": "h"}, journal_slots=512)
    meta = json.loads((tmp_path / "rank-00000.meta.json").read_text())
    w.close()
    assert meta["journal"] == {"slots": 512, "inflight_slots": 4096}
    assert pl.read_ipc_stream(tmp_path / "rank-00000.events.arrow").height == 0


@pytest.mark.parametrize("slots", [0])
def test_no_journal_when_disabled(tmp_path, slots):
    w = RankTraceWriter(tmp_path, 0, {"world_size": 2, "host": "h"}, journal_slots=slots)
    assert w.journal is None and not list(tmp_path.glob("*.journal"))
    w.add_event(event(0))
    w.close()
    assert load_trace(tmp_path).events.height == 1
