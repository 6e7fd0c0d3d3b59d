"""The writer on a read-only, missing or full place: one clear line, never a traceback,
and the trace says why it ends early."""

from __future__ import annotations

import logging
import os
import subprocess
import time
import uuid

import pytest

from syncpace.errors import TraceWriteError
from syncpace.trace import RankTraceWriter, load_trace


def event(i: int) -> tuple:
    return (0, i // 10, "0", 1, i, "all_reduce", 4, "float32", -1, 1000 + i, 1001 + i, "future",
            "completed", None, -1)  # fmt: skip


def test_a_place_that_cannot_hold_a_directory_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(TraceWriteError) as info:
        RankTraceWriter(tmp_path / "file" / "run", 0, {"world_size": 1, "host": "h"})
    message = str(info.value)
    assert message.startswith(str(tmp_path / "file" / "run"))
    assert "cannot create the run directory: Not a directory" in message
    assert "\n" not in message


def test_metadata_is_strict_json_even_with_non_finite_values(tmp_path):
    w = RankTraceWriter(tmp_path, 0, {"world_size": 1, "host": "h", "odd": float("nan")})
    w.close(pacing={"delay_max_s": float("inf"), "policy": "early"})
    trace = load_trace(tmp_path)  # the reader refuses NaN tokens: there are none
    assert trace.meta[0]["odd"] is None and trace.meta[0]["pacing"]["delay_max_s"] is None


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / f"full-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.root
def test_a_full_disk_stops_the_writer_once_and_the_trace_says_so(small_disk, caplog):
    w = RankTraceWriter(
        small_disk / "run", 0, {"world_size": 1, "host": "h"}, flush_interval_s=0.01
    )
    with caplog.at_level(logging.WARNING, logger="syncpace"):
        for i in range(20_000):
            w.add_event(event(i))
            if i % 500 == 499:  # let the flusher drain, as a job's pace would (bounded)
                deadline = time.monotonic() + 10
                while w._events.rows and w.write_error is None and time.monotonic() < deadline:
                    time.sleep(0.005)
        w.update_meta(extra="after the failure")  # no exception either
        w.close()
    assert "No space left on device" in (w.write_error or "")
    failures = [r for r in caplog.records if "writing the trace" in r.getMessage()]
    assert len(failures) == 1 and "the job goes on" in failures[0].getMessage()
    trace = load_trace(small_disk / "run")
    assert 0 < trace.events.height < 20_000
    assert trace.meta[0]["write_error"] == w.write_error
    assert any("stopped writing its trace (No space left on device)" in x for x in trace.warnings)
    c = trace.completeness[0]
    assert c.write_error and not c.finished
    assert c.events_found + c.events_dropped >= 20_000 - 500  # every event is accounted for
