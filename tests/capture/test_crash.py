"""A rank that dies keeps what it flushed; SIGTERM and a normal exit lose nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from multirank import free_port, rank_env
from syncpace.errors import TraceError
from syncpace.trace import load_trace

WORKER = Path(__file__).parent / "workers" / "loop.py"
COUNT = 200

pytestmark = pytest.mark.multirank


def start(out: Path, mode: str) -> subprocess.Popen:
    env = rank_env(0, 1, free_port(), {"TRACE_DIR": str(out)})
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(COUNT), mode],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"no {prefix!r} from worker: {proc.stderr.read()[-2000:]}")


def wait_for_flushed_events(out: Path, timeout: float = 30) -> int:
    """Poll (bounded) until the trace on disk holds events."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            n = load_trace(out).events.height
        except TraceError:
            n = 0
        if n:
            return n
        time.sleep(0.05)
    raise AssertionError("no events were flushed")


def test_normal_exit_loses_nothing(tmp_path):
    proc = start(tmp_path, "exit")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, -signal.SIGABRT) and "WORKER_DONE" in out, err
    trace = load_trace(tmp_path)
    assert trace.events.height == COUNT
    assert trace.meta[0]["finished"] is True
    assert trace.meta[0]["events_written"] == COUNT
    assert trace.warnings == ()


def test_sigterm_loses_nothing(tmp_path):
    proc = start(tmp_path, "wait")
    wait_for_line(proc, "ISSUED")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    trace = load_trace(tmp_path)
    assert trace.events.height == COUNT
    assert trace.meta[0]["finished"] is True


def test_sigkill_leaves_a_readable_prefix(tmp_path):
    proc = start(tmp_path, "wait")
    wait_for_line(proc, "ISSUED")
    flushed = wait_for_flushed_events(tmp_path)
    proc.kill()
    proc.communicate(timeout=30)
    trace = load_trace(tmp_path)
    assert flushed <= trace.events.height <= COUNT
    assert trace.meta[0]["finished"] is False
    assert any("did not finish cleanly" in w for w in trace.warnings)
    assert (trace.events["exit_ns"] >= trace.events["enter_ns"]).all()


# Crash-proof writing: the journal keeps what the Arrow streams had not received yet. ----
DYING = Path(__file__).parent / "workers" / "dying.py"


def start_dying(out: Path, mode: str, count: int, flush_s: float, world: int = 1) -> list:
    port = free_port()
    return [
        subprocess.Popen(
            [sys.executable, str(DYING), mode, str(count)],
            env=rank_env(rank, world, port, {"TRACE_DIR": str(out), "FLUSH_S": str(flush_s)}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]


def test_sigkill_loses_nothing_recorded_20ms_before(tmp_path):
    """A rank all-reducing as fast as it can is killed mid-stream. Every call whose
    completion it printed 20 ms or more before the kill is in the trace, once; the
    streams (flushed every 50 ms) and the journal's tail join without a gap."""
    (proc,) = start_dying(tmp_path, "stream", 0, flush_s=0.05)
    printed: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"worker ended early: {proc.stderr.read()[-2000:]}")
        k, t = map(int, line.split())
        printed[k] = t
        if k >= 400:
            break
    killed_ns = time.monotonic_ns()
    proc.kill()
    rest, err = proc.communicate(timeout=30)
    for line in rest.splitlines():
        k, t = map(int, line.split())
        printed[k] = t
    assert proc.returncode == -signal.SIGKILL
    trace = load_trace(tmp_path)
    seqs = trace.events.filter(pl.col("status") == "completed")["seq"].to_list()
    assert len(seqs) == len(set(seqs)), "a record was read twice"
    must = {k for k, t in printed.items() if t <= killed_ns - 20_000_000}
    assert len(must) >= 300
    assert must <= set(seqs), f"lost: {sorted(must - set(seqs))[:10]}"
    # nothing is missing in between either: completed calls are 0..max without a hole
    assert sorted(seqs) == list(range(max(seqs) + 1))
    assert any("recovered from its journal" in w for w in trace.warnings)
    assert trace.meta[0]["finished"] is False


def test_os_abort_keeps_every_call_with_nothing_flushed(tmp_path):
    """SIGABRT (os.abort(), what gloo's and std::terminate's aborts raise) 20 ms after
    the last call, with a flush interval the run never reaches: the journal alone
    holds the calls, and all of them come back."""
    count = 150
    (proc,) = start_dying(tmp_path, "abort", count, flush_s=3600)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGABRT, err[-2000:]
    assert f"ISSUED {count}" in out
    trace = load_trace(tmp_path)
    events = trace.events.sort("seq")
    assert events["seq"].to_list() == list(range(count))
    assert set(events["status"]) == {"completed"}
    assert (events["exit_ns"] >= events["enter_ns"]).all()
    assert set(events["op"]) == {"all_reduce"} and set(events["bytes"]) == {64}
    assert set(events["group"]) == {"0"} and set(events["dtype"]) == {"float32"}


def test_std_terminate_in_a_hung_collective_leaves_it_pending(tmp_path):
    """Rank 1 enters an all-reduce rank 0 never joins and dies by std::terminate in
    it: its completed calls are all there, and the hung one is recorded as pending —
    entered, never completed — with its group, sequence number and size."""
    count = 20
    procs = start_dying(tmp_path, "hang", count, flush_s=3600, world=2)
    r0, r1 = procs
    try:
        _out1, err1 = r1.communicate(timeout=60)
        assert r1.returncode == -signal.SIGABRT, err1[-2000:]
        wait_for_line(r0, "ISSUED")
    finally:
        r0.kill()
        r0.communicate(timeout=30)
    trace = load_trace(tmp_path)
    rank1 = trace.events.filter(pl.col("rank") == 1).sort("seq")
    assert rank1["seq"].to_list() == list(range(count + 1))
    assert rank1["status"].to_list() == ["completed"] * count + ["pending"]
    hung = rank1.row(count, named=True)
    assert (hung["op"], hung["group"], hung["bytes"], hung["exit_ns"]) == (
        "all_reduce",
        "0",
        64,
        -1,
    )
    assert hung["enter_ns"] > rank1["exit_ns"][count - 1]
    rank0 = trace.events.filter(pl.col("rank") == 0)
    assert sorted(rank0["seq"].to_list()) == list(range(count))
