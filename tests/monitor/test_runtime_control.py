"""Runtime control through RUN_DIR/control.json: rules, and a real job obeying it."""

from __future__ import annotations

import json
import os
import select
import time
from pathlib import Path

import pytest

from multirank import check, join, start_ranks
from syncpace.capture.runtime_control import CONTROL_FILE, ControlWatcher, parse, trusted
from syncpace.trace import load_trace

WORKER = Path(__file__).resolve().parent / "workers" / "steady.py"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not valid JSON"),
        ("[1]", "expected a JSON object"),
        ('{"trace": false}', "unknown keys trace"),
        ('{"tracing": "no"}', "'tracing' must be true or false"),
        ('{"monitor": {"monitor_every": 3}}', "monitor.monitor_every is not a runtime setting"),
        ('{"monitor": {"monitor_jump": NaN}}', "monitor.monitor_jump must be in 0..1e6"),
        ('{"monitor": {"monitor_jump": true}}', "monitor.monitor_jump must be a number"),
        ('{"pacing": 1}', "'pacing' must be true or false"),
        ('{"keep": 300}', "'keep' must be an object with before_s and/or after_s"),
        ('{"keep": {"before": 3}}', "'keep' must be an object"),
        ('{"keep": {"before_s": -1}}', "keep.before_s must be seconds in 0..31536000"),
        ('{"keep": {"after_s": NaN}}', "keep.after_s must be seconds"),
    ],
)
def test_bad_control_files_are_refused_naming_the_problem(text, problem):
    with pytest.raises(ValueError, match=f"^ctl: .*{problem}"):
        parse(text, "ctl")


def test_pacing_and_keep_are_read():
    control = parse('{"pacing": false, "keep": {"before_s": 300}}', "ctl")
    assert control.pacing is False and control.keep == (300.0, 0.0)
    assert parse("{}", "ctl").keep is None and parse("{}", "ctl").pacing is None


def test_the_same_content_gives_the_same_version_on_every_rank():
    a = parse('{"tracing": false, "monitor": {"monitor_jump": 0.5}}', "a")
    b = parse('{"monitor": {"monitor_jump": 0.5}, "tracing": false}', "b")
    assert a.version == b.version and 0 < a.version < 2**52
    assert parse('{"tracing": true}', "c").version != a.version


def test_only_a_private_regular_file_is_trusted(tmp_path):
    path = tmp_path / CONTROL_FILE
    assert trusted(path) == "absent"
    path.write_text("{}")
    path.chmod(0o644)
    assert trusted(path) is None
    path.chmod(0o664)
    assert trusted(path) == "writable by group or others (chmod go-w)"
    path.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(path)
    assert trusted(link) == "not a regular file"
    if os.geteuid() == 0:
        os.chown(path, 12345, -1)
        assert trusted(path).startswith("owned by uid 12345")


def test_the_watcher_calls_back_once_per_version(tmp_path):
    seen = []
    watcher = ControlWatcher(tmp_path, 1.0, seen.append)
    path = tmp_path / CONTROL_FILE
    assert watcher.poll() is None
    path.write_text('{"tracing": false}')
    path.chmod(0o600)
    assert watcher.poll().tracing is False
    assert watcher.poll() is None  # unchanged
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # touched, same content
    assert watcher.poll() is None
    path.write_text('{"tracing": true}')
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert watcher.poll().tracing is True
    assert [c.tracing for c in seen] == [False, True]


def _wait_for_step(proc, step: int, timeout: float) -> None:
    """Read rank 0's output until it reports ``step`` (bounded)."""
    deadline = time.monotonic() + timeout
    buffer = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if not ready:
            continue
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"rank 0 ended before step {step}")
        buffer += line
        if line.strip() == f"STEP {step}":
            return
    raise AssertionError(f"no STEP {step} within {timeout}s:\n{buffer[-2000:]}")


def _write_control(path: Path, content: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(content))
    tmp.chmod(0o600)
    os.replace(tmp, path)


@pytest.mark.multirank
def test_a_running_job_pauses_and_resumes_tracing_and_takes_new_thresholds(tmp_path):
    run_dir = tmp_path / "trace"
    run_dir.mkdir()
    env = {
        "TRACE_DIR": str(run_dir),
        "SYNCPACE_CONTROL_POLL_S": "0.1",
        "SYNCPACE_MONITOR_EVERY": "5",
        "SYNCPACE_FLUSH_INTERVAL_S": "0.2",
    }
    steps = 90
    procs = start_ranks(WORKER, 2, [str(steps)], env=env)
    control = run_dir / CONTROL_FILE
    try:
        _wait_for_step(procs[0], 15, 60)
        _write_control(control, {"tracing": False, "monitor": {"monitor_sensitivity": 9}})
        _wait_for_step(procs[0], 50, 60)
        _write_control(control, {"tracing": True, "monitor": {"monitor_sensitivity": 9}})
    finally:
        results = check(join(procs, timeout=90))
    assert results
    trace = load_trace(run_dir)
    for rank in (0, 1):
        meta = trace.meta[rank]["control"]
        ((paused_from, paused_to),) = meta["paused_steps"]
        assert 15 < paused_from < paused_to <= steps
        events = trace.events.filter(trace.events["rank"] == rank)
        traced = set(events["step"].to_list())
        # every step outside the pause has its all-reduce, none inside has one
        assert traced.isdisjoint(range(paused_from, paused_to))
        assert set(range(steps)) - traced == set(range(paused_from, paused_to))
        assert meta["paused_events"] == paused_to - paused_from  # one call a step, in code
        monitor = trace.meta[rank]["monitor"]
        assert monitor["thresholds"]["monitor_sensitivity"] == 9
    applied = {trace.meta[r]["monitor"]["control_applied_at_step"] for r in (0, 1)}
    assert len(applied) == 1 and applied.pop() > 15  # the same window on both ranks
