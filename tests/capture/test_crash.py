"""A rank that dies keeps what it flushed; SIGTERM and a normal exit lose nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

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
