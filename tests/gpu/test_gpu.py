"""Device timing on a real GPU: the essentials of benchmarks/gpu_check.py as tests.

Marked ``gpu`` and skipped where torch sees no CUDA device; on a machine with one, run
``pytest -m gpu tests/gpu``. Each test runs one job of the check (its own processes,
traced with syncpace) and asserts what the check reports.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def check():
    sys.path.insert(0, str(BENCH))
    try:
        import gpu_check

        yield gpu_check
    finally:
        sys.path.remove(str(BENCH))


def _context(check, tmp_path: Path, limit_s: float = 240.0):
    return check.Context(tmp_path, time.monotonic() + limit_s)


def test_a_large_nccl_all_reduce_has_device_times_within_5pct_of_its_kernel(check, tmp_path):
    result = check.devtime_run(_context(check, tmp_path), "nccl", 1, check.NCCL_BYTES)
    rank = result["ranks"]["0"]
    assert rank["calls_traced"] == rank["calls_with_device_times"] == check.CALLS, rank
    assert rank["matched"] == check.CALLS, rank
    assert rank["within_5pct"], rank
    clock = result["device_clock"]["0"]
    assert clock and clock["source"] == "cuda_event" and clock["unresolved"] == 0, clock


def test_pacing_moves_the_device_arrival_and_the_host_does_not_sleep(check, tmp_path):
    ctx = _context(check, tmp_path)
    check.part_c(ctx)
    assert ctx.part["checks"] == {
        "placed_on_device": True,
        "host_did_not_sleep": True,
        "arrival_shifted_by_delay": True,
    }, ctx.part["figures"]


def test_a_cpu_bound_and_a_gpu_bound_rank_told_apart_by_run_ahead(check, tmp_path):
    ctx = _context(check, tmp_path)
    check.part_b(ctx)
    checks = ctx.part["checks"]
    assert checks["gpu_bound_rank_runs_ahead"], ctx.part["figures"]["run_ahead_ms"]
    assert checks["cpu_bound_rank_does_not"], ctx.part["figures"]["run_ahead_ms"]
    assert checks["host_says_cpu_bound_rank_last"], ctx.part["figures"]["last_by_host"]
    assert checks["device_says_gpu_bound_rank_last"], ctx.part["figures"]["last_by_device"]
