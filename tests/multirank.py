"""Spawn real gloo ranks as subprocesses, join them with a timeout, check every exit.

Each rank runs ``python WORKER ARGS`` with the torchrun-style environment (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). Workers print ``WORKER_DONE`` once
their work and the trace are complete. gloo can abort a process during teardown
after ``destroy_process_group``; such an exit (SIGABRT after ``WORKER_DONE``) is
accepted deliberately and reported, any other non-zero exit fails the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from syncpace.ports import free_port

DONE = "WORKER_DONE"
#: What a rank's stderr holds when gloo's rendezvous failed before the job ran (its
#: traceback passes through init_process_group, or gloo names its full-mesh connect):
#: on a loaded 2-core machine a peer can miss the connect deadline. Such a launch never
#: reached what a test checks, so it may be started again.
RENDEZVOUS_FAILURES = ("connectFullMesh failed", "in init_process_group")
LAUNCH_ATTEMPTS = 3
SRC = str(Path(__file__).resolve().parents[1] / "src")


@dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str

    @property
    def finished(self) -> bool:
        return DONE in self.stdout


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
    return env


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
        procs.append(
            subprocess.Popen(
                [sys.executable, str(worker), *args],
                env=rank_env(rank, world, port, extra),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def join(procs: list[subprocess.Popen], timeout: float = 90) -> list[RankResult]:
    """Wait for every rank; on timeout kill them all and fail with their output."""
    results = []
    try:
        for rank, proc in enumerate(procs):
            out, err = proc.communicate(timeout=timeout)
            results.append(RankResult(rank, proc.returncode, out, err))
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        outputs = [p.communicate()[1][-2000:] for p in procs]
        raise AssertionError(
            f"ranks did not finish within {timeout}s; stderr tails: {outputs}"
        ) from None
    return results


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


def failed_at_rendezvous(results: list[RankResult]) -> bool:
    """Whether no rank finished and some rank failed inside gloo's rendezvous."""
    return not any(r.finished for r in results) and any(
        r.returncode != 0 and any(m in r.stderr for m in RENDEZVOUS_FAILURES) for r in results
    )


def run_ranks(
    worker: Path, world: int, args: list[str] = (), timeout: float = 90, **kw
) -> list[RankResult]:
    """Run the ranks to completion, every exit checked; a launch that failed at gloo's
    rendezvous (:data:`RENDEZVOUS_FAILURES`) is started again, on a new port."""
    for attempt in range(1, LAUNCH_ATTEMPTS + 1):
        results = join(start_ranks(worker, world, list(args), **kw), timeout=timeout)
        if attempt == LAUNCH_ATTEMPTS or not failed_at_rendezvous(results):
            return check(results)
        print(f"gloo's rendezvous failed (attempt {attempt}); starting the ranks again")
    raise AssertionError("unreachable")
