"""The benchmark across an emulated fabric: one rank per host namespace, traced into
one run directory, results read back. Needs root (the fabric does)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from syncpace.bench.config import BenchConfig
from syncpace.bench.results import load_bench
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.config import to_env
from syncpace.errors import BenchError
from syncpace.fabric.backend import SystemBackend
from syncpace.fabric.runner import RunOptions, run_job
from syncpace.fabric.spec import parse_rate


def bench_on_fabric(
    state: Any,  # syncpace.fabric.state.FabricState
    config: BenchConfig,
    run_dir: Path,
    faults: Sequence[Any] = (),  # syncpace.fabric.faults.Fault
    echo: IO[str] | None = None,
) -> dict[str, Any]:
    """Run the benchmark ``config`` describes on every host of ``state`` (one rank per
    host, its settings passed as ``SYNCPACE_BENCH_*`` variables, bounded by
    ``config.timeout_s``); returns ``bench.json``."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    env = traced_env(run_dir, TraceConfig(dir=str(run_dir)))
    env.update(to_env(dataclasses.replace(config, out=str(run_dir), overwrite=True, nproc=0)))
    command = [sys.executable, "-m", "syncpace", "bench"]
    options = RunOptions(timeout_s=config.timeout_s + 30, faults=list(faults))
    result = run_job(state, command, run_dir, SystemBackend(), options, env, echo)
    if result.returncode != 0:
        raise BenchError(
            f"the benchmark failed on fabric {state.name}: {result.reason} "
            f"(logs in {run_dir / 'fabric-logs'})"
        )
    return load_bench(run_dir)


def host_rate_gbps(state: Any) -> float:
    """The configured rate of the fabric's host links, in GB/s (10⁹ bytes/s)."""

    return parse_rate(state.spec["host_rate"], "host_rate") / 8e9


def busbw_fractions(
    bench: dict[str, Any], rate_gbps: float, op: str = "all_reduce", min_bytes: int = 0
) -> list[tuple[int, float, float]]:
    """``(size, busbw GB/s, busbw / link rate)`` of ``op`` for sizes ≥ ``min_bytes``."""
    return [
        (r["size_bytes"], r["busbw_gbps"], r["busbw_gbps"] / rate_gbps)
        for r in bench["rows"]
        if r["op"] == op and r["size_bytes"] >= min_bytes
    ]
