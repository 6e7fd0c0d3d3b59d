"""Spawn real gloo ranks as subprocesses, join them with a timeout, check every exit.

Each rank runs ``python WORKER ARGS`` with the torchrun-style environment (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). Workers print ``WORKER_DONE`` once
their work and the trace are complete. gloo can abort a process during teardown
after ``destroy_process_group``; such an exit (SIGABRT after ``WORKER_DONE``) is
accepted deliberately and reported, any other non-zero exit fails the test.

A launch whose process group failed to connect at start-up (:func:`failed_at_startup`)
never reached what a test checks: :func:`launch` starts it again, on a new port, at
most :data:`LAUNCH_ATTEMPTS` times in all. Every such restart is kept in
:data:`RESTARTS` and listed at the end of the test run (``tests/conftest.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import rankfork
from syncpace.ports import free_port

DONE = "WORKER_DONE"
#: A rank's traceback passes through this frame when it failed while its process group
#: was being created: the job had not started.
STARTUP_FRAME = "in init_process_group"
#: What a rank's stderr names (case aside) when the store's or gloo's connections failed
#: there: the port was taken between picking and binding it ("address already in use"),
#: a peer never reached the store or missed gloo's connect deadline on a loaded 2-core
#: machine ("connection refused", "connectFullMesh failed", "timed out").
CONNECT_FAILURES = (
    "address already in use",
    "connection refused",
    "connection reset by peer",
    "connection closed by peer",
    "connectfullmesh failed",
    "timed out",
    "socket timeout",
)
LAUNCH_ATTEMPTS = 3
SRC = str(Path(__file__).resolve().parents[1] / "src")
#: what every rank's exit skips: ranksite/sitecustomize.py
RANKSITE = str(Path(__file__).resolve().parent / "ranksite")


@dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str
    #: Killed here because another rank had already failed at start-up.
    killed: bool = False

    @property
    def finished(self) -> bool:
        return DONE in self.stdout

    @property
    def startup_failure(self) -> str | None:
        """The line naming the connection failure, when this rank failed at start-up."""
        if self.returncode == 0 or STARTUP_FRAME not in self.stderr:
            return None
        for line in reversed(self.stderr.splitlines()):
            if any(m in line.lower() for m in CONNECT_FAILURES):
                return line.strip()
        return None


@dataclass(frozen=True)
class Restart:
    what: str
    attempt: int
    reason: str


#: Every launch started again after a start-up failure, in order (this run's record).
RESTARTS: list[Restart] = []


def record_restart(what: str, attempt: int, reason: str) -> None:
    """Count a launch started again (listed in the run's terminal summary)."""
    RESTARTS.append(Restart(what, attempt, reason))
    print(f"{what}: start-up failed (attempt {attempt}): {reason}; starting it again")


def rank_env(
    rank: int, world: int, port: int, extra: dict[str, str] | None = None
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    env["PYTHONPATH"] = with_ranksite(env["PYTHONPATH"])
    return env


def with_ranksite(path: str | None) -> str:
    """``path`` (a ``PYTHONPATH``) ending with :data:`RANKSITE`, there once."""
    entries = [e for e in (path or "").split(os.pathsep) if e and e != RANKSITE]
    return os.pathsep.join([*entries, RANKSITE])


def start_ranks(
    worker: Path,
    world: int,
    args: list[str] = (),
    per_rank_env: dict[int, dict[str, str]] | None = None,
    env: dict[str, str] | None = None,
) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for rank in range(world):
        extra = dict(env or {})
        extra.update((per_rank_env or {}).get(rank, {}))
        env_here = rank_env(rank, world, port, extra)
        forked = rankfork.start(str(worker), list(args), env_here)
        procs.append(
            forked
            or subprocess.Popen(
                [sys.executable, str(worker), *args],
                env=env_here,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


class _Drain(threading.Thread):
    """Reads one pipe to its end, so a rank never blocks on a full pipe."""

    def __init__(self, stream) -> None:
        super().__init__(daemon=True)
        self.stream, self.text = stream, ""

    def run(self) -> None:
        with self.stream:
            self.text = self.stream.read()

    def result(self) -> str:
        self.join(timeout=10)  # the rank has exited: its pipe ends (unless a child holds it)
        return self.text


def join(
    procs: list[subprocess.Popen], timeout: float = 90, *, stop_at_startup_failure: bool = False
) -> list[RankResult]:
    """Wait for every rank; on timeout kill them all and fail with their output.

    With ``stop_at_startup_failure``, once a rank has failed at start-up the others
    (left waiting for it in the rendezvous) are killed at once. Any error here, a
    test's timeout included, kills the ranks: none outlives its test."""
    drains = [(_Drain(p.stdout), _Drain(p.stderr)) for p in procs]
    for out, err in drains:
        out.start()
        err.start()
    deadline = time.monotonic() + timeout
    killed: set[int] = set()
    try:
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                _kill(procs)
                tails = [err.result()[-2000:] for _, err in drains]
                raise AssertionError(
                    f"ranks did not finish within {timeout}s; stderr tails: {tails}"
                )
            if stop_at_startup_failure and any(
                p.returncode not in (None, 0)
                and RankResult(r, p.returncode, "", drains[r][1].result()).startup_failure
                for r, p in enumerate(procs)
            ):
                killed = {r for r, p in enumerate(procs) if p.poll() is None}
                _kill(procs)
                break
            time.sleep(0.05)
    except BaseException:
        _kill(procs)
        raise
    return [
        RankResult(r, p.wait(), out.result(), err.result(), killed=r in killed)
        for r, (p, (out, err)) in enumerate(zip(procs, drains, strict=True))
    ]


def _kill(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        proc.wait()


def check(results: list[RankResult]) -> list[RankResult]:
    for r in results:
        teardown_abort = r.returncode == -signal.SIGABRT and r.finished
        if r.returncode != 0 and not teardown_abort:
            raise AssertionError(
                f"rank {r.rank} exited with {r.returncode}\nstdout:\n{r.stdout[-3000:]}\n"
                f"stderr:\n{r.stderr[-3000:]}"
            )
        if not r.finished:
            raise AssertionError(f"rank {r.rank} exited 0 without {DONE}:\n{r.stderr[-3000:]}")
    return results


def failed_at_startup(results: list[RankResult]) -> str | None:
    """The first rank's start-up failure when the whole launch failed at start-up: no
    rank finished, one failed to connect while its process group was being created, and
    every other one did too or was killed for it. Anything else (a rank that failed
    after start-up, or for another reason) is a real failure: None."""
    if any(r.finished for r in results):
        return None
    reasons = [r.startup_failure for r in results if not r.killed]
    if not reasons or not all(reasons):
        return None
    return reasons[0]


def launch(
    worker: Path,
    world: int,
    args: list[str] = (),
    timeout: float = 90,
    reset: Callable[[], None] | None = None,
    **kw,
) -> list[RankResult]:
    """Run the ranks to completion, unchecked; a launch that failed at start-up
    (:func:`failed_at_startup`) is counted and started again, on a new port, after
    ``reset()`` (which clears what the failed launch left)."""
    for attempt in range(1, LAUNCH_ATTEMPTS + 1):
        procs = start_ranks(worker, world, list(args), **kw)
        results = join(procs, timeout=timeout, stop_at_startup_failure=True)
        reason = failed_at_startup(results)
        if attempt == LAUNCH_ATTEMPTS or reason is None:
            return results
        record_restart(Path(worker).name, attempt, reason)
        if reset is not None:
            reset()
    raise AssertionError("unreachable")


def run_ranks(
    worker: Path, world: int, args: list[str] = (), timeout: float = 90, **kw
) -> list[RankResult]:
    """:func:`launch`, then every exit checked."""
    return check(launch(worker, world, args, timeout, **kw))
