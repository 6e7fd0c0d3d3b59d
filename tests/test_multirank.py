"""The multi-rank launch helper: a launch that failed to connect at start-up is started
again (bounded, counted); a failure once the job has started never is."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import multirank
from multirank import (
    LAUNCH_ATTEMPTS,
    RankResult,
    check,
    failed_at_startup,
    launch,
    rank_env,
    run_ranks,
)
from syncpace.capture.launch import BOOTSTRAP_DIR

WORKER = Path(__file__).parent / "startup_worker.py"

_INIT = """Traceback (most recent call last):
  File "worker.py", line 20, in <module>
    dist.init_process_group("gloo")
  File "torch/distributed/distributed_c10d.py", line 1892, in init_process_group
    store, rank, world_size = next(rendezvous_iterator)
"""
_STEP = """Traceback (most recent call last):
  File "worker.py", line 31, in <module>
    dist.all_reduce(x)
  File "torch/distributed/distributed_c10d.py", line 2950, in all_reduce
    work.wait()
"""
IN_USE = _INIT + (
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
    "local network address. port: 36637, useIpv6: false, code: -98, name: EADDRINUSE, "
    "message: address already in use\n"
)
REFUSED = _INIT + "torch.distributed.DistNetworkError: Connection refused\n"
MESH = _INIT + "RuntimeError: [gloo/transport/tcp/pair.cc:446] Connection closed by peer\n"
MESH_CONNECT = _INIT + "RuntimeError: Gloo connectFullMesh failed with [pair.cc:144] no error\n"
STORE_TIMEOUT = _INIT + (
    "torch.distributed.DistStoreError: Timed out after 31 seconds waiting for clients. "
    "1/2 clients joined.\n"
)
BAD_ARGUMENT = _INIT + "ValueError: Invalid backend: 'glo'\n"
AFTER_START = _STEP + "RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer\n"


def rank(r: int, code: int, stderr: str = "", stdout: str = "", killed: bool = False):
    return RankResult(r, code, stdout, stderr, killed=killed)


@pytest.mark.parametrize("stderr", [IN_USE, REFUSED, MESH, MESH_CONNECT, STORE_TIMEOUT])
def test_a_connection_failure_inside_init_process_group_is_a_startup_failure(stderr):
    assert failed_at_startup([rank(0, 1, stderr), rank(1, 1, stderr)])
    # the rank left waiting for the failed one was killed for it
    assert failed_at_startup([rank(0, 1, stderr), rank(1, -9, killed=True)])


def test_the_reason_names_the_connection_failure():
    assert failed_at_startup([rank(0, 1, IN_USE), rank(1, -9, killed=True)]).endswith(
        "message: address already in use"
    )


@pytest.mark.parametrize(
    "results",
    [
        # a connection failure after the process group formed: the job had started
        [rank(0, 1, AFTER_START), rank(1, 1, AFTER_START)],
        # not a connection failure, though inside init_process_group: a bug, every time
        [rank(0, 1, BAD_ARGUMENT), rank(1, 1, BAD_ARGUMENT)],
        # one rank failed at start-up, another for its own reason
        [rank(0, 1, IN_USE), rank(1, 1, "ImportError: no module named x\n")],
        # a rank finished: the job ran
        [rank(0, 1, REFUSED), rank(1, 0, stdout="WORKER_DONE\n")],
        # a rank that ended on its own before the others, without an error
        [rank(0, 1, REFUSED), rank(1, 0)],
        # every rank killed: nothing recognised
        [rank(0, -9, killed=True), rank(1, -9, killed=True)],
    ],
)
def test_other_failures_are_not_startup_failures(results):
    assert failed_at_startup(results) is None


@pytest.fixture
def restarts(monkeypatch) -> list:
    """This test's own restarts, kept out of the run's summary."""
    record: list = []
    monkeypatch.setattr(multirank, "RESTARTS", record)
    return record


def held_port_first(monkeypatch, launches_held: int) -> socket.socket:
    """The first ``launches_held`` launches get a port this test holds bound: rank 0's
    store cannot listen on it, and the others find nobody there."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    ports = [held.getsockname()[1]] * launches_held
    free_port = multirank.free_port
    monkeypatch.setattr(multirank, "free_port", lambda: ports.pop() if ports else free_port())
    return held


def launches(log: Path) -> int:
    return log.read_text().splitlines().count("0")


@pytest.mark.multirank
def test_a_launch_that_failed_to_connect_at_startup_is_restarted_and_counted(
    tmp_path, monkeypatch, restarts
):
    log = tmp_path / "launches"
    with held_port_first(monkeypatch, 1):
        results = run_ranks(WORKER, 2, timeout=60, env={"LAUNCH_LOG": str(log)})
    assert all(r.finished for r in results)
    assert launches(log) == 2
    assert [(r.what, r.attempt) for r in restarts] == [(WORKER.name, 1)]
    assert "address already in use" in restarts[0].reason


@pytest.mark.multirank
def test_restarts_are_bounded(tmp_path, monkeypatch, restarts):
    log = tmp_path / "launches"
    with held_port_first(monkeypatch, LAUNCH_ATTEMPTS), pytest.raises(AssertionError) as exc:
        run_ranks(WORKER, 2, timeout=60, env={"LAUNCH_LOG": str(log)})
    assert "address already in use" in str(exc.value)
    assert launches(log) == LAUNCH_ATTEMPTS
    assert [r.attempt for r in restarts] == list(range(1, LAUNCH_ATTEMPTS))


@pytest.mark.multirank
def test_a_failure_after_startup_is_not_restarted(tmp_path, restarts):
    log = tmp_path / "launches"
    env = {"LAUNCH_LOG": str(log)}
    results = launch(WORKER, 2, ["fail-after-start"], timeout=60, env=env)
    assert launches(log) == 1
    assert restarts == []
    assert results[1].returncode != 0 and "Connection refused (after start-up)" in results[1].stderr
    assert not any(r.finished for r in results)
    with pytest.raises(AssertionError, match="exited with"):
        check(results)


FROZEN_AT_EXIT = (
    "import atexit, gc, sys\n"
    "atexit.register(lambda: print('handler', gc.get_freeze_count()))\n"
    "atexit._run_exitfuncs()\n"  # the program's own handler, then the rank's freeze
    "print('frozen', gc.get_freeze_count() > 0)\n"
    "sys.exit(3)\n"
)

# launches, restarts and exits counted, never timed: they hold at any CPU load
pytestmark = pytest.mark.untimed


@pytest.mark.parametrize("bootstrap", [False, True])
def test_a_rank_freezes_its_heap_after_its_own_exit_handlers(bootstrap):
    """Every rank's exit skips the collection over torch's objects (ranksite/), even
    under ``syncpace run``'s bootstrap, which shadows it: the program's own exit handlers
    run first and see nothing frozen; its exit status is its own."""
    extra = {"PYTHONPATH": str(BOOTSTRAP_DIR)} if bootstrap else {}
    env = rank_env(0, 1, 0, extra)
    proc = subprocess.run(
        [sys.executable, "-c", FROZEN_AT_EXIT], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.splitlines() == ["handler 0", "frozen True"]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_the_run_summary_lists_restarts_counted_in_every_worker(tmp_path, workers):
    """A restart counted in a worker process (``-n 2``) reaches the run's summary, as
    one counted in the run's own process does."""
    (tmp_path / "test_restarted.py").write_text(
        "import multirank\n\n"
        "def test_one():\n"
        "    multirank.record_restart('job-a', 1, 'connection refused')\n\n"
        "def test_two():\n"
        "    pass\n"
    )
    tests_dir = Path(__file__).parent
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "/dev/null", "--rootdir", str(tmp_path)]
        + ["-p", "conftest", "-n", str(workers), "-q", str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tests_dir), *sys.path])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 multi-rank launch restart(s)" in run.stdout
    assert (
        "job-a started again after failing at start-up (attempt 1): connection refused"
        in run.stdout
    )
