"""A run directory is exclusive: a second launcher refuses at once, a stale lock is
recognised, and the first run's trace stays intact."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from multirank import SRC, free_port
from syncpace.capture import launch
from syncpace.capture.launch import LOCK_NAME, prepare_run_dir
from syncpace.errors import ConfigError
from syncpace.trace import load_trace

WORKER = Path(__file__).resolve().parents[1] / "capture" / "workers" / "steps_job.py"
HOLDER = "import sys; from syncpace.capture.launch import prepare_run_dir as p; " \
    "p(sys.argv[1], False); print('HELD', flush=True); sys.stdin.read()"  # fmt: skip


def hold(run_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "HELD"
    return proc


@pytest.fixture(autouse=True)
def _release():
    yield
    for lock in list(launch._HELD.values()):
        lock.release()


def test_a_live_holder_is_refused_at_once_and_released_on_exit(tmp_path):
    run = tmp_path / "run"
    holder = hold(run)
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        prepare_run_dir(str(run), overwrite=True)
    assert time.monotonic() - start < 0.5
    message = str(info.value)
    assert message.startswith(f"{run}: in use by another syncpace run (pid {holder.pid} on ")
    assert "\n" not in message
    holder.communicate("", timeout=30)
    assert not (run / LOCK_NAME).exists()  # a clean exit leaves no lock behind
    assert prepare_run_dir(str(run), overwrite=False) == run.resolve()
    assert launch._HELD[run.resolve()].took_over is None


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path):
    run = tmp_path / "run"
    holder = hold(run)
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=30)
    assert json.loads((run / LOCK_NAME).read_text())["pid"] == holder.pid  # left behind
    prepare_run_dir(str(run), overwrite=False)
    assert launch._HELD[run.resolve()].took_over["pid"] == holder.pid
    assert json.loads((run / LOCK_NAME).read_text())["pid"] == os.getpid()


@pytest.mark.parametrize(
    ("owner", "outcome"),
    [
        ("dead", None),
        ("alive", "which still runs"),
        ("elsewhere", "which this host cannot check"),
    ],
)
def test_where_no_flock_tells_the_pid_and_host_do(tmp_path, owner, outcome):
    """A lock file nobody holds (a file system without locks): pid and host decide."""
    run = tmp_path / "run"
    run.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    pid = {"dead": dead.pid, "alive": os.getppid(), "elsewhere": 1}[owner]
    host = "some-other-host" if owner == "elsewhere" else socket.gethostname()
    (run / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": host, "started": 0}))
    if outcome is None:
        prepare_run_dir(str(run), overwrite=False)
        assert launch._HELD[run.resolve()].took_over["pid"] == pid
    else:
        with pytest.raises(ConfigError, match=outcome) as info:
            prepare_run_dir(str(run), overwrite=False)
        assert f"remove {run / LOCK_NAME}" in str(info.value)


def test_a_place_that_cannot_be_a_directory_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="cannot create the run directory: Not a directory"):
        prepare_run_dir(str(tmp_path / "file" / "run"), overwrite=False)


def syncpace_run(out: Path, steps: int) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "syncpace", "run", "--out", str(out), "--quiet", "--",
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-port", str(free_port()), str(WORKER), str(steps), "50",
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.multirank
def test_two_runs_into_one_directory_the_second_refuses_the_first_is_intact(tmp_path):
    out, steps = tmp_path / "run", 40
    first = syncpace_run(out, steps)
    deadline = time.monotonic() + 60
    while not list(out.glob("rank-*.meta.json")) and time.monotonic() < deadline:
        time.sleep(0.05)  # bounded wait for the first run's ranks to attach
    assert first.poll() is None, first.communicate()[1]
    start = time.monotonic()
    second = syncpace_run(out, steps)
    _, err = second.communicate(timeout=60)
    refused_s = time.monotonic() - start
    assert second.returncode == 2
    assert err.strip().splitlines() == [
        f"syncpace run: error: {out}: in use by another syncpace run (pid {first.pid} on "
        + err.split(f"(pid {first.pid} on ", 1)[1].strip()
    ]
    assert refused_s < 10  # interpreter start-up; no waiting on the first run
    _, err1 = first.communicate(timeout=120)
    assert first.returncode == 0, err1[-2000:]
    trace = load_trace(out)
    assert trace.ranks == [0, 1] and trace.warnings == ()
    assert trace.steps.group_by("rank").len()["len"].to_list() == [steps, steps]
    assert not (out / LOCK_NAME).exists()
