"""End-to-end analysis speed: load + metrics + diagnosis of a large synthetic trace.

    python benchmarks/analysis_speed.py                 # 256 ranks x 2000 steps x 20
    python benchmarks/analysis_speed.py --ranks 32 --steps 500   # quick look

The trace is generated once (vectorised numpy straight into Arrow IPC streams; the
row-by-row writer would take minutes) into ``--dir`` and reused. The measurement runs
in a fresh child process with ``POLARS_MAX_THREADS=1`` (one core) and reports events/s
and the child's peak RSS (``resource.getrusage``). Targets: >= 2M events/s, <= 4 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from syncpace.trace import schema

STEP_NS = 100_000_000  # 100 ms iterations
GPUS_PER_NODE = 8


def _strings(value: str, n: int) -> pa.Array:
    """A string column of ``n`` copies of ``value``, built from buffers (no Python loop)."""
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def generate(out: Path, ranks: int, steps: int, per_step: int, seed: int = 0) -> int:
    """Write a DDP-like trace: ``per_step`` bucket all-reduces per iteration, rank 7 slow."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    n_inst = steps * per_step
    step_of = np.repeat(np.arange(steps, dtype=np.int64), per_step)
    slot = np.tile(np.arange(per_step, dtype=np.int64), steps)
    issue = step_of * STEP_NS + 20_000_000 + slot * (60_000_000 // per_step)
    late = rng.lognormal(0.0, 0.3, size=(ranks, n_inst)).astype(np.float32) * 50_000
    late[7] += 5_000_000  # one persistent straggler, so the diagnosis has work to do
    enter = issue[None, :] + late.astype(np.int64)
    del late
    done = enter.max(axis=0) + 1_500_000
    nbytes = np.full(n_inst, 25 << 20, dtype=np.int64)
    for r in range(ranks):
        exit_ = done + rng.integers(0, 2_000, n_inst)
        columns = {
            "rank": pa.array(np.full(n_inst, r, np.int32)),
            "step": pa.array(step_of),
            "group": _strings("0", n_inst),
            "group_size": pa.array(np.full(n_inst, ranks, np.int32)),
            "seq": pa.array(np.arange(n_inst, dtype=np.int64)),
            "op": _strings("all_reduce", n_inst),
            "bytes": pa.array(nbytes),
            "dtype": _strings("float32", n_inst),
            "peer": pa.array(np.full(n_inst, -1, np.int32)),
            "enter_ns": pa.array(enter[r]),
            "exit_ns": pa.array(exit_),
            "timing": _strings("simulated", n_inst),
            "status": _strings("completed", n_inst),
            "error": pa.nulls(n_inst, pa.string()),
            "wait_ns": pa.array(np.full(n_inst, -1, np.int64)),
        }
        _write(out / f"{schema.rank_stem(r)}{schema.EVENTS_SUFFIX}", schema.EVENTS, columns)
        starts = np.arange(steps, dtype=np.int64) * STEP_NS
        _write(
            out / f"{schema.rank_stem(r)}{schema.STEPS_SUFFIX}",
            schema.STEPS,
            {
                "rank": pa.array(np.full(steps, r, np.int32)),
                "step": pa.array(np.arange(steps, dtype=np.int64)),
                "start_ns": pa.array(starts),
                "end_ns": pa.array(np.maximum(starts + STEP_NS, done[per_step - 1 :: per_step])),
                "pacing_delay_ns": pa.array(np.zeros(steps, np.int64)),
            },
        )
        meta = {
            "schema": schema.SCHEMA_NAME,
            "schema_version": schema.SCHEMA_VERSION,
            "rank": r,
            "world_size": ranks,
            "host": f"node{r // GPUS_PER_NODE}",
            "local_rank": r % GPUS_PER_NODE,
            "clock": {"offset_ns": 0, "uncertainty_ns": 1_000},
            "groups": {"0": {"ranks": list(range(ranks))}},
            "finished": True,
            "source": "synthetic",
        }
        (out / f"{schema.rank_stem(r)}{schema.META_SUFFIX}").write_text(json.dumps(meta))
    return ranks * n_inst


def _write(path: Path, arrow_schema: pa.Schema, columns: dict[str, pa.Array]) -> None:
    table = pa.table(columns, schema=arrow_schema)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, arrow_schema) as writer:
        writer.write_table(table, max_chunksize=8192)


def measure(run_dir: Path) -> dict[str, float]:
    """Load, measure and diagnose ``run_dir`` in this process; return the figures."""
    import resource

    from syncpace.analysis import analyze
    from syncpace.trace import load_trace

    c0, t0 = time.process_time(), time.perf_counter()
    trace = load_trace(run_dir)
    t1 = time.perf_counter()
    analysis = analyze(trace)
    t2 = time.perf_counter()
    cpu = time.process_time() - c0  # robust to other processes competing for the core
    events = trace.events.height
    return {
        "events": events,
        "load_s": t1 - t0,
        "analyze_s": t2 - t1,
        "total_s": t2 - t0,
        "cpu_s": cpu,
        "events_per_s": events / (t2 - t0),
        "events_per_cpu_s": events / cpu,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
        "top_finding": analysis.top.mode,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--collectives", type=int, default=20, help="per step and rank")
    parser.add_argument("--dir", type=Path, default=None, help="trace directory (kept)")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    run_dir = args.dir or Path(tempfile.gettempdir()) / (
        f"syncpace-bench-{args.ranks}x{args.steps}x{args.collectives}"
    )
    if not (run_dir / f"{schema.rank_stem(args.ranks - 1)}{schema.META_SUFFIX}").exists():
        t = time.perf_counter()
        n = generate(run_dir, args.ranks, args.steps, args.collectives)
        print(f"generated {n:,} events in {time.perf_counter() - t:.1f} s into {run_dir}")
    env = {**os.environ, "POLARS_MAX_THREADS": "1"}
    child = subprocess.run(
        [sys.executable, __file__, "--measure", str(run_dir)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        print(child.stderr, file=sys.stderr)
        return child.returncode
    r = json.loads(child.stdout.strip().splitlines()[-1])
    print(
        f"{r['events']:,} events: load {r['load_s']:.2f} s + analyze {r['analyze_s']:.2f} s = "
        f"{r['total_s']:.2f} s wall ({r['cpu_s']:.2f} s CPU) -> "
        f"{r['events_per_s'] / 1e6:.2f} M events/s wall, "
        f"{r['events_per_cpu_s'] / 1e6:.2f} M events/CPU-s on one core; "
        f"peak RSS {r['peak_rss_gb']:.2f} GB; top finding: {r['top_finding']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
