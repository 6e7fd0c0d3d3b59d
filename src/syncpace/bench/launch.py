"""``syncpace bench --nproc N``: start N local gloo ranks of the benchmark and supervise them.

Each rank is ``python -m syncpace bench`` with the torchrun-style environment (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT on a free port) and the settings passed as
``SYNCPACE_BENCH_*`` variables. Rank 0 writes to this terminal; the others to
``bench-logs/rank-R.log`` in the run directory. The launch is bounded by
``timeout_s``; once one rank fails the others get a short grace, then are killed.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from syncpace.bench import rundir
from syncpace.bench.config import BenchConfig
from syncpace.capture.launch import prepare_run_dir
from syncpace.config import env_name, to_env
from syncpace.errors import BenchError
from syncpace.ports import free_port

LOG_DIR = "bench-logs"
GRACE_S = 10.0
#: Exit codes a rank may end with: 0 ok, 1 the check found wrong elements.
_EXPECTED = (0, 1)


def rank_env(config: BenchConfig, rank: int, port: int) -> dict[str, str]:
    own = {env_name(BenchConfig, f.name) for f in dataclasses.fields(BenchConfig)}
    # the settings travel explicitly; tracer settings and test hooks pass through
    env = {k: v for k, v in os.environ.items() if k not in own}
    env.update(to_env(config))
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(config.nproc),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(config.nproc),
        GROUP_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )
    env.setdefault("OMP_NUM_THREADS", "1")  # N ranks share this machine's cores
    env[env_name(BenchConfig, "nproc")] = "0"  # a rank never launches ranks
    return env


def launch_local(config: BenchConfig, json_out: bool = False) -> int:
    """Run the benchmark on ``config.nproc`` local ranks; returns rank 0's exit code."""

    run_dir = rundir.resolve(config)
    if not os.environ.get("SYNCPACE_DIR"):
        run_dir = prepare_run_dir(str(run_dir), config.overwrite)
        (run_dir / rundir.BENCH_FILE).unlink(missing_ok=True)
    logs = run_dir / LOG_DIR
    logs.mkdir(parents=True, exist_ok=True)
    child = dataclasses.replace(config, out=str(run_dir), overwrite=True)
    port = free_port()
    argv = [sys.executable, "-m", "syncpace", "bench", *(["--json"] if json_out else [])]
    procs: list[subprocess.Popen] = []
    files = []
    try:
        for rank in range(config.nproc):
            out = None if rank == 0 else open(logs / f"rank-{rank:05d}.log", "w")  # noqa: SIM115
            files.append(out)
            procs.append(
                subprocess.Popen(
                    argv,
                    env=rank_env(child, rank, port),
                    stdout=out,
                    stderr=None if rank == 0 else subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
        codes = _join(procs, config.timeout_s)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        for f in files:
            if f is not None:
                f.close()
    return _verdict(codes, logs)


def _join(procs: list[subprocess.Popen], timeout_s: float) -> list[int | None]:
    """Wait for every rank, bounded; ``None`` for a rank that had to be killed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return codes  # type: ignore[return-value]
        if any(c is not None and c not in _EXPECTED for c in codes):
            deadline = min(deadline, time.monotonic() + GRACE_S)  # peers wait on it
        time.sleep(0.05)
    killed = []
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed.append(proc)
    for proc in procs:
        proc.wait(timeout=10)
    return [None if p in killed else p.returncode for p in procs]


def _verdict(codes: list[int | None], logs: Path) -> int:
    for rank, code in enumerate(codes):
        where = "above" if rank == 0 else str(logs / f"rank-{rank:05d}.log")
        if code is None:
            raise BenchError(f"rank {rank} did not finish in time and was killed (log: {where})")
        if code not in _EXPECTED:
            raise BenchError(f"rank {rank} failed with exit code {code} (log: {where})")
    return max(codes)  # type: ignore[type-var]
