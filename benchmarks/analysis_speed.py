"""End-to-end analysis speed: load + metrics + diagnosis of a large synthetic trace.

    python benchmarks/analysis_speed.py                 # 256 ranks x 2000 steps x 20
    python benchmarks/analysis_speed.py --ranks 32 --steps 500   # quick look
    python benchmarks/analysis_speed.py --case 10M      # 4,096 ranks x 25 steps x 100
    python benchmarks/analysis_speed.py --case 100M --delete    # x 245 steps
    python benchmarks/analysis_speed.py --case 1000M --delete   # x 2,441 steps
    python benchmarks/analysis_speed.py --case 10M --dask-workers 2   # on a Dask cluster

The trace is generated once (vectorised numpy straight into Arrow IPC streams; the
row-by-row writer would take hours) into ``--dir`` and reused (``--delete`` removes it
afterwards). Each batch carries the writer's CRC-32, and the batches are the size of a
real flush: the writer flushes once a second, and a rank making 100 collectives in a
100 ms iteration writes 1,000 calls a second (``--batch-rows``, default 1,000). The
tracer writes uncompressed streams (~120 bytes an event); 1,000M of those do not fit
this machine's disk, so the streams are lz4-compressed (``--compression``; ~38 bytes
an event): lz4 is the codec cheapest to decode (48 us for a 1,000-row batch, against
9 us uncompressed and 243 us for zstd), so the figures stay close to what a real
trace costs. The measurement runs in a fresh child process with
``POLARS_MAX_THREADS=1`` (one core): the streaming analysis of the run directory (what
``syncpace diagnose`` runs), and with ``--in-memory`` the loaded-trace path for
comparison; ``--dask-workers N`` runs the same plan on a local Dask cluster of N
one-thread workers. It reports events/s (wall and per CPU-second, the CPU of every
process) and the peak RSS (``resource.getrusage``). Targets: >= 2M
events/s per core; <= 1 GB at 10M events, <= 8 GB at 1,000M (GB: 10^9 bytes; the
peak RSS as ``getrusage`` gives it, in KiB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from syncpace import allocators
from syncpace.trace import schema

STEP_NS = 100_000_000  # 100 ms iterations
GPUS_PER_NODE = 8
#: The issue's cases: (ranks, steps, collectives per step).
CASES = {"10M": (4096, 25, 100), "100M": (4096, 245, 100), "1000M": (4096, 2441, 100)}
LATE_CAP_NS = 1_000_000  # lateness is capped so ranks can be generated one at a time


def _strings(value: str, n: int) -> pa.Array:
    """A string column of ``n`` copies of ``value``, built from buffers (no Python loop)."""
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def generate(
    out: Path,
    ranks: int,
    steps: int,
    per_step: int,
    seed: int = 0,
    batch_rows: int = 1000,
    compression: str | None = "lz4",
) -> int:
    """Write a DDP-like trace: ``per_step`` bucket all-reduces per iteration, rank 7 slow.

    One rank at a time (memory stays that of one rank's events): every call completes
    a fixed time after the latest possible arrival (lateness is capped)."""
    out.mkdir(parents=True, exist_ok=True)
    n_inst = steps * per_step
    step_of = np.repeat(np.arange(steps, dtype=np.int64), per_step)
    slot = np.tile(np.arange(per_step, dtype=np.int64), steps)
    issue = step_of * STEP_NS + 20_000_000 + slot * (60_000_000 // per_step)
    done = issue + 5_000_000 + LATE_CAP_NS + 1_500_000
    nbytes = np.full(n_inst, 25 << 20, dtype=np.int64)
    starts = np.arange(steps, dtype=np.int64) * STEP_NS
    step_end = np.maximum(starts + STEP_NS, done[per_step - 1 :: per_step] + 2_000)
    shared = {
        "step": pa.array(step_of),
        "group": _strings("0", n_inst),
        "group_size": pa.array(np.full(n_inst, ranks, np.int32)),
        "seq": pa.array(np.arange(n_inst, dtype=np.int64)),
        "op": _strings("all_reduce", n_inst),
        "bytes": pa.array(nbytes),
        "dtype": _strings("float32", n_inst),
        "peer": pa.array(np.full(n_inst, -1, np.int32)),
        "timing": _strings("simulated", n_inst),
        "status": _strings("completed", n_inst),
        "error": pa.nulls(n_inst, pa.string()),
        "wait_ns": pa.array(np.full(n_inst, -1, np.int64)),
    }
    for r in range(ranks):
        rng = np.random.default_rng([seed, r])
        late = np.minimum(rng.lognormal(0.0, 0.3, size=n_inst) * 50_000, LATE_CAP_NS)
        if r == 7:
            late += 5_000_000  # one persistent straggler, so the diagnosis has work to do
        enter = issue + late.astype(np.int64)
        columns = {
            **shared,
            "rank": pa.array(np.full(n_inst, r, np.int32)),
            "enter_ns": pa.array(enter),
            "exit_ns": pa.array(done + rng.integers(0, 2_000, n_inst)),
        }
        path = out / f"{schema.rank_stem(r)}{schema.EVENTS_SUFFIX}"
        _write(path, schema.EVENTS, columns, batch_rows, compression)
        _write(
            out / f"{schema.rank_stem(r)}{schema.STEPS_SUFFIX}",
            schema.STEPS,
            {
                "rank": pa.array(np.full(steps, r, np.int32)),
                "step": pa.array(np.arange(steps, dtype=np.int64)),
                "start_ns": pa.array(starts),
                "end_ns": pa.array(step_end),
                "pacing_delay_ns": pa.array(np.zeros(steps, np.int64)),
            },
            batch_rows,
            compression,
        )
        meta = {
            "schema": schema.SCHEMA_NAME,
            "schema_version": schema.SCHEMA_VERSION,
            "rank": r,
            "world_size": ranks,
            "host": f"node{r // GPUS_PER_NODE}",
            "local_rank": r % GPUS_PER_NODE,
            "clock": {"offset_ns": 0, "uncertainty_ns": 1_000},
            "groups": {"0": {"ranks": list(range(ranks))}} if r == 0 else {},
            "finished": True,
            "source": "synthetic",
        }
        (out / f"{schema.rank_stem(r)}{schema.META_SUFFIX}").write_text(json.dumps(meta))
    return ranks * n_inst


def _write(
    path: Path,
    arrow_schema: pa.Schema,
    columns: dict[str, pa.Array],
    batch_rows: int,
    compression: str | None,
) -> None:
    """As the tracer's writer writes a stream: record batches with their CRC-32."""
    conform = schema.events_table if arrow_schema is schema.EVENTS else schema.steps_table
    table = conform(columns)
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with (
        pa.OSFile(str(path), "wb") as sink,
        pa.ipc.new_stream(sink, arrow_schema, options=options) as writer,
    ):
        for piece in table.to_batches(max_chunksize=batch_rows):
            # A slice shares its parent's buffers; the checksum covers the buffers a
            # reader gets back (the batch's own rows), so round-trip it first.
            batch = pa.ipc.read_record_batch(piece.serialize(), arrow_schema)
            writer.write_batch(
                batch, custom_metadata={schema.CHECKSUM_KEY: schema.batch_checksum(batch)}
            )


def measure_dask(run_dir: Path, workers: int) -> dict[str, float]:
    """The same plan on a local Dask cluster of ``workers`` processes (one thread each):
    wall time, CPU of this process and of the workers, peak RSS of each; and whether
    the result equals the single-process one (measured after, not timed)."""
    import resource

    from syncpace.analysis.distributed import dask_metrics, local_client
    from syncpace.analysis.streaming import same_metrics, stream_metrics

    allocators.reuse_freed_memory()
    client = local_client(workers)
    try:
        client.run(allocators.reuse_freed_memory)
        cpu0 = sum(client.run(time.process_time).values())
        c0, t0 = time.process_time(), time.perf_counter()
        run = dask_metrics(run_dir, client)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0 + sum(client.run(time.process_time).values()) - cpu0
        peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9)
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()
    client_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    single, _ = stream_metrics(run_dir)
    events = int(run.quality["events"])
    return {
        "events": events,
        "total_s": wall,
        "cpu_s": cpu,
        "events_per_s": events / wall,
        "events_per_cpu_s": events / cpu,
        "peak_rss_gb": client_peak,
        "worker_peak_rss_gb": max(peaks.values()),
        "equal": same_metrics(single, run) == [],
    }


def measure(run_dir: Path, in_memory: bool = False) -> dict[str, float]:
    """Analyse ``run_dir`` (metrics, findings, sampled iterations) in this process."""
    import resource

    from syncpace.analysis import analyze
    from syncpace.trace import load_trace

    allocators.reuse_freed_memory()  # as the command line does

    before = resource.getrusage(resource.RUSAGE_SELF)
    c0, t0 = time.process_time(), time.perf_counter()
    analysis = analyze(load_trace(run_dir) if in_memory else run_dir)
    t1 = time.perf_counter()
    cpu = time.process_time() - c0  # robust to other processes competing for the core
    after = resource.getrusage(resource.RUSAGE_SELF)
    events = int(analysis.runs[0].quality["events"])
    return {
        "events": events,
        "total_s": t1 - t0,
        "cpu_s": cpu,
        # the kernel's share: reading the files, and the pages an allocator takes again
        "system_s": after.ru_stime - before.ru_stime,
        "events_per_s": events / (t1 - t0),
        "events_per_cpu_s": events / cpu,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "top_finding": analysis.top.mode,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), help="one of the issue's cases")
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--collectives", type=int, default=20, help="per step and rank")
    parser.add_argument("--batch-rows", type=int, default=1000, help="rows per record batch")
    parser.add_argument(
        "--compression",
        choices=("lz4", "zstd", "none"),
        default="lz4",
        help="codec of the generated streams (the tracer writes none; see the docstring)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="trace directory (kept)")
    parser.add_argument("--delete", action="store_true", help="remove the trace afterwards")
    parser.add_argument("--in-memory", action="store_true", help="load the whole trace")
    parser.add_argument(
        "--dask-workers", type=int, default=0, help="run the plan on a local Dask cluster"
    )
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        if args.dask_workers:
            print(json.dumps(measure_dask(args.measure, args.dask_workers)))
        else:
            print(json.dumps(measure(args.measure, args.in_memory)))
        return 0
    if args.case:
        args.ranks, args.steps, args.collectives = CASES[args.case]
    run_dir = args.dir or Path(tempfile.gettempdir()) / (
        f"syncpace-bench-{args.ranks}x{args.steps}x{args.collectives}"
    )
    try:
        if not (run_dir / f"{schema.rank_stem(args.ranks - 1)}{schema.META_SUFFIX}").exists():
            t = time.perf_counter()
            n = generate(
                run_dir,
                args.ranks,
                args.steps,
                args.collectives,
                batch_rows=args.batch_rows,
                compression=None if args.compression == "none" else args.compression,
            )
            size = sum(p.stat().st_size for p in run_dir.iterdir()) / 1e9
            print(
                f"generated {n:,} events in {time.perf_counter() - t:.1f} s into {run_dir} "
                f"({size:.2f} GB, {size * 1e9 / n:.1f} bytes/event)"
            )
        # the child's allocators as the command line sets them (syncpace.allocators)
        env = {
            allocators.POLARS_MALLOC_CONF: allocators.KEEP_PAGES,
            allocators.ARROW_PURGE_DELAY: allocators.ARROW_KEEP_MS,
            **os.environ,
        }
        env["POLARS_MAX_THREADS"] = "1"
        command = [sys.executable, __file__, "--measure", str(run_dir)]
        if args.dask_workers:
            command += ["--dask-workers", str(args.dask_workers)]
        child = subprocess.run(
            command + (["--in-memory"] if args.in_memory else []),
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        if args.delete and run_dir.exists():
            shutil.rmtree(run_dir)
    if child.returncode != 0:
        print(child.stderr, file=sys.stderr)
        return child.returncode
    r = json.loads(child.stdout.strip().splitlines()[-1])
    if args.dask_workers:
        print(
            f"{r['events']:,} events ({args.ranks:,} ranks, Dask, {args.dask_workers} workers "
            f"of one thread): {r['total_s']:.2f} s wall ({r['cpu_s']:.2f} s CPU, all "
            f"processes) -> {r['events_per_s'] / 1e6:.2f} M events/s wall, "
            f"{r['events_per_cpu_s'] / 1e6:.2f} M events/CPU-s; peak RSS client "
            f"{r['peak_rss_gb']:.2f} GB, worker {r['worker_peak_rss_gb']:.2f} GB; "
            f"equal to one process: {r['equal']}"
        )
        return 0 if r["equal"] else 1
    mode = "in memory" if args.in_memory else "streamed"
    print(
        f"{r['events']:,} events ({args.ranks:,} ranks, {mode}): {r['total_s']:.2f} s wall "
        f"({r['cpu_s']:.2f} s CPU, {r['system_s']:.2f} s of it in the kernel) -> "
        f"{r['events_per_s'] / 1e6:.2f} M events/s wall, "
        f"{r['events_per_cpu_s'] / 1e6:.2f} M events/CPU-s on one core; "
        f"peak RSS {r['peak_rss_gb']:.2f} GB; top finding: {r['top_finding']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
