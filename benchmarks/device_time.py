"""Device times through the tracer's own path, on the fake GPU the tests use.

1. Accuracy: one rank issues all-reduces behind compute kernels on a fake device whose
   clock has its own offset and drift; each traced device time against the time the
   device really reached the event, beside the uncertainty the trace states.
2. Pacing: a 50 ms delay on one step; how far it moved the device's arrival, and
   whether the host slept.
3. Who is late: three ranks, one with a slow GPU, then one with a late CPU; which rank
   arrives last by host and by device time, and each rank's run-ahead.
4. Host cost: what the device path adds per call, its Python alone (a device whose
   events cost nothing), on the calling thread and on the flush thread. CUDA's own
   event records and queries come on top on a GPU (not measured here).

    python benchmarks/device_time.py [--calls 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from _ranks import spawn_ranks
from rich.console import Console
from rich.table import Table

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS / "capture"))

from test_device_timeline import MS, FixedDelays, Job  # noqa: E402

from fakedevice import FakeDevice  # noqa: E402
from syncpace.trace import load_trace  # noqa: E402

FAKE_GPU = TESTS / "capture" / "workers" / "fake_gpu.py"


def accuracy(calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(Path(tmp), offset_ns=123_456_789_000, drift_ppm=40.0)
        for _ in range(calls):
            job.step(2 * MS)
        events = job.finish()
        bound = load_trace(tmp).meta[0]["device_clock"]["uncertainty_ns"]
    truth = np.array([e.truth_ns for e in job.recorded[0::2]])
    err = np.abs(events["device_enter_ns"].to_numpy() - truth)
    ahead = (events["device_enter_ns"] - events["enter_ns"]).to_numpy()
    return {
        "calls": calls,
        "error_p50_us": float(np.median(err)) / 1e3,
        "error_max_us": float(err.max()) / 1e3,
        "stated_uncertainty_us": bound / 1e3,
        "run_ahead_last_ms": float(ahead[-1]) / 1e6,
    }


def pacing() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(Path(tmp))
        job.tracer.controller = FixedDelays({2: 0.05})
        for _ in range(4):
            job.step(2 * MS)
        events = job.finish()
        steps = load_trace(tmp).steps.sort("step")
    gaps = (events["device_enter_ns"][1:] - events["device_exit_ns"][:-1]).to_list()
    return {
        "delay_ms": 50.0,
        "device_arrival_shift_ms": (gaps[1] - (gaps[0] + gaps[2]) / 2) / 1e6,
        "device_delay_ns_in_steps": steps["device_delay_ns"].to_list(),
    }


def who_is_late(mode: str, steps: int = 12) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        base = dict(os.environ, TRACE_DIR=tmp, PYTHONPATH=os.pathsep.join(sys.path))
        procs = spawn_ranks(3, [str(FAKE_GPU), mode, "1", str(steps)], base)
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            if "WORKER_DONE" not in out:
                raise SystemExit(f"a rank failed: {err[-2000:]}")
        events = load_trace(tmp).events.filter(pl.col("step") >= 2)

    def last(column: str) -> dict[int, int]:
        per_step = events.sort(column).group_by("step").agg(pl.col("rank").last())
        return {r: per_step["rank"].to_list().count(r) for r in range(3)}

    ahead = events.group_by("rank").agg((pl.col("device_enter_ns") - pl.col("enter_ns")).median())
    return {
        "mode": mode,
        "steps": steps - 2,
        "last_by_host": last("enter_ns"),
        "last_by_device": last("device_enter_ns"),
        "run_ahead_median_ms": {r: v / 1e6 for r, v in sorted(ahead.rows())},
    }


class NullEvent:
    __slots__ = ()


class NullDevice(FakeDevice):
    """Events that cost nothing: the Python of the device path alone."""

    def new_event(self) -> NullEvent:
        return NullEvent()

    def record(self, event: Any) -> None:
        pass

    def record_idle(self, event: Any) -> None:
        pass

    def done(self, event: Any) -> bool:
        return True

    def elapsed_ns(self, first: Any, second: Any) -> float:
        return 0.0


def host_cost(calls: int, rounds: int = 7) -> dict[str, Any]:
    """What the device path adds per call, its Python alone (a device whose events
    cost nothing): on the calling thread (the device check, the arrival event, the
    hand-over at completion) and on the flush thread (resolving a call's two events
    into times), medians of ``rounds`` blocks of ``calls``."""
    hot, flush = [], []
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(Path(tmp))
        tracer, timeline = job.tracer, job.tracer.device_timeline
        tracer.writer.before_flush = None  # resolved here, into nothing, not written
        timeline.device = NullDevice(host_now=tracer.now)
        timeline._maybe_anchor()
        tensor, row = torch.ones(4), (0,) * 15
        for _ in range(rounds):
            start = time.perf_counter_ns()
            for token in range(calls):
                if tracer.device_owns(tensor):
                    timeline.finish(row, timeline.start(), token, True)
            hot.append((time.perf_counter_ns() - start) / calls)
            start = time.perf_counter_ns()
            timeline._resolve_once(lambda row, token: None)
            flush.append((time.perf_counter_ns() - start) / calls)
        job.finish()
    return {
        "calls_per_block": calls,
        "calling_thread_us": statistics.median(hot) / 1e3,
        "flush_thread_us": statistics.median(flush) / 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = {
        "accuracy": accuracy(args.calls),
        "pacing": pacing(),
        "slow_gpu": who_is_late("slow_gpu"),
        "late_cpu": who_is_late("late_cpu"),
        "host_cost": host_cost(2000),
    }
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    table = Table("figure", "value", title="device times on the fake GPU")
    for part, values in figures.items():
        for key, value in values.items():
            table.add_row(
                f"{part}.{key}", f"{value:.3f}" if isinstance(value, float) else str(value)
            )
    Console().print(table)


if __name__ == "__main__":
    main()
