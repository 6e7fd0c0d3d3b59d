"""Conversion speed and peak memory of ``syncpace import kineto`` on a ≥ 1 GB trace set.

    python benchmarks/import_speed.py [--gb 1.1] [--ranks 8] [--gzip] [--repeats 3]

Writes a synthetic trace set shaped like what ``torch.profiler`` writes for an NCCL
training job with ``record_shapes`` and ``with_stack`` (per iteration: a
``ProfilerStep#`` span, Python frames, ``aten::`` ops with shapes, CUDA runtime
launches, GPU kernels and, for every DDP bucket, ``c10d::allreduce_`` →
``record_param_comms`` → ``ncclDevKernel_*``, pretty-printed as Kineto prints it), then
converts it in a fresh process, ``--repeats`` times, and prints per run and as medians:
input MB/s, collectives/s and the child's peak RSS. As a yardstick it also times ijson
alone reading the same files (items, no processing) in the same way: the ratio says
what the conversion adds to parsing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE_NS = 1_790_000_000_000_000_000
COMPUTE_OPS = ("aten::addmm", "aten::mul", "aten::add_", "aten::relu", "aten::native_layer_norm")


def _event(ph_cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: dict) -> str:
    """One event as Kineto prints it (two-space indent, one key per line)."""
    body = json.dumps(args, separators=(",", ": "))
    return (
        f'  {{\n    "ph": "X", "cat": "{ph_cat}", "name": "{name}", "pid": {pid}, '
        f'"tid": {tid},\n    "ts": {ts:.3f}, "dur": {dur:.3f},\n    "args": {body}\n  }}'
    )


def write_rank(path: Path, rank: int, world: int, target_bytes: int) -> dict[str, int]:
    """One rank's trace of about ``target_bytes``; returns event and collective counts."""
    pid, tid, stream, nccl_stream = 1000 + rank, 1000 + rank, 7, 20
    header = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": rank, "name": "NVIDIA H100 80GB HBM3"}],
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": world,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "pg_size": world,
                    "ranks": list(range(world)),
                    "backend_config": "cuda:nccl",
                }
            ],
            "nccl_version": "2.27.5",
        },
        "record_shapes": 1,
        "host_name": f"node{rank // 8}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_NS,
    }
    counts = {"events": 0, "collectives": 0}
    ts, ext, corr, seq, step = 1_000_000.0 + rank * 3.0, 0, 0, 0, 0
    with open(path, "w") as f:
        f.write("{\n" + json.dumps(header)[1:-1] + ',\n  "traceEvents": [\n')
        first = True

        def put(text: str) -> None:
            nonlocal first
            f.write(text if first else ",\n" + text)
            first = False
            counts["events"] += 1

        while f.tell() < target_bytes:
            step_start = ts
            for layer in range(24):
                for j, name in enumerate(COMPUTE_OPS):
                    ext += 1
                    corr += 1
                    put(
                        _event(
                            "python_function",
                            "torch/nn/modules/module.py(1747): _call_impl",
                            pid,
                            tid,
                            ts,
                            9.0,
                            {"Python id": ext, "Python parent id": ext - 1},
                        )
                    )
                    put(
                        _event(
                            "cpu_op",
                            name,
                            pid,
                            tid,
                            ts + 0.5,
                            8.0,
                            {
                                "External id": ext,
                                "Record function id": 0,
                                "Concrete Inputs": ["", "", ""],
                                "Input type": ["c10::BFloat16"] * 3,
                                "Input Strides": [[4096, 1], [4096, 1], [1]],
                                "Input Dims": [[64, 4096], [4096, 4096], [4096]],
                                "Ev Idx": ext,
                            },
                        )
                    )
                    put(
                        _event(
                            "cuda_runtime",
                            "cudaLaunchKernel",
                            pid,
                            tid,
                            ts + 2.0,
                            4.0,
                            {"External id": ext, "correlation": corr, "cbid": 211},
                        )
                    )
                    put(
                        _event(
                            "kernel",
                            f"sm90_xmma_gemm_bf16_{j}",
                            rank,
                            stream,
                            ts + 20.0,
                            50.0,
                            {
                                "External id": ext,
                                "correlation": corr,
                                "device": rank,
                                "stream": stream,
                                "grid": [132, 1, 1],
                                "block": [384, 1, 1],
                                "registers per thread": 168,
                                "shared memory": 232448,
                            },
                        )
                    )
                    ts += 12.0
                if layer % 6 == 5:  # a DDP bucket is ready: all-reduce it
                    ext += 1
                    corr += 1
                    seq += 1
                    meta = {
                        "Collective name": "allreduce",
                        "dtype": "BFloat16",
                        "In msg nelems": 25_165_824,
                        "Out msg nelems": 25_165_824,
                        "Group size": world,
                        "In split size": "[]",
                        "Out split size": "[]",
                        "Global rank start": 0,
                        "Global rank stride": 1,
                        "Process Group Name": "0",
                        "Process Group Description": "default_pg",
                        "Process Group Ranks": str(list(range(world))),
                        "Rank": rank,
                        "Seq": seq,
                    }
                    put(
                        _event(
                            "cpu_op",
                            "c10d::allreduce_",
                            pid,
                            tid,
                            ts,
                            40.0,
                            {"External id": ext, "Input Dims": [[[25165824]]]},
                        )
                    )
                    put(
                        _event(
                            "cpu_op",
                            "record_param_comms",
                            pid,
                            tid,
                            ts + 2.0,
                            30.0,
                            {"External id": ext, **meta},
                        )
                    )
                    put(
                        _event(
                            "cuda_runtime",
                            "cudaLaunchKernel",
                            pid,
                            tid,
                            ts + 10.0,
                            5.0,
                            {"External id": ext, "correlation": corr},
                        )
                    )
                    put(
                        _event(
                            "kernel",
                            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                            rank,
                            nccl_stream,
                            ts + 30.0 + (rank % 3) * 20.0,
                            900.0 - (rank % 3) * 20,
                            {
                                "External id": ext,
                                "correlation": corr,
                                "device": rank,
                                "stream": nccl_stream,
                                **meta,
                            },
                        )
                    )
                    counts["collectives"] += 1
                    ts += 50.0
            put(_event("user_annotation", "Optimizer.step#AdamW.step", pid, tid, ts, 300.0, {}))
            ts += 310.0
            put(
                _event(
                    "user_annotation",
                    f"ProfilerStep#{step}",
                    pid,
                    tid,
                    step_start,
                    ts - step_start,
                    {},
                )
            )
            step += 1
            ts += 5.0
        f.write(f'\n  ],\n  "traceName": "{path.name}"\n}}\n')
    return counts


# Each measurement runs in a fresh interpreter that reports its own peak RSS (the
# high-water mark of the whole process: interpreter, imports, parsing and writing).
CHILD = """
import json, resource, sys, time
from syncpace.importers import ImportConfig, convert
t = time.perf_counter()
r = convert("kineto", [sys.argv[1]], sys.argv[2], config=ImportConfig(overwrite=True))
print(json.dumps({"seconds": time.perf_counter() - t, "events": r.events,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

PARSE_ONLY = """
import json, resource, sys, time
from pathlib import Path
from syncpace.importers import jsonstream
t = time.perf_counter(); n = 0
for p in sorted(Path(sys.argv[1]).iterdir()):
    for _ in jsonstream.iter_items(p, None):
        n += 1
print(json.dumps({"seconds": time.perf_counter() - t, "items": n,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_child(code: str, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gb", type=float, default=1.1, help="total size of the trace set")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--gzip", action="store_true", help="also measure the gzip'd set")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--dir",
        help="where to write the set (default: a temporary directory); a set already "
        "there is reused",
    )
    p.add_argument("--keep", action="store_true", help="keep the generated files")
    args = p.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="syncpace-import-bench-"))
    src, out = root / "kineto", root / "out"
    src.mkdir(parents=True, exist_ok=True)
    per_rank = int(args.gb * 1e9 / args.ranks)
    t = time.perf_counter()
    if args.dir and any(src.glob("rank*.pt.trace.json")):
        print(f"reusing the trace set in {src}")
    else:
        totals = {"events": 0, "collectives": 0}
        for rank in range(args.ranks):
            counts = write_rank(src / f"rank{rank}.pt.trace.json", rank, args.ranks, per_rank)
            for k in totals:
                totals[k] += counts[k]
        print(
            f"trace set: {args.ranks} ranks, {totals['events']:,} events, "
            f"{totals['collectives']:,} collectives (written in {time.perf_counter() - t:.0f} s)"
        )
    size = sum(f.stat().st_size for f in src.glob("rank*.pt.trace.json"))
    print(f"{size / 1e9:.2f} GB in {len(list(src.iterdir()))} files")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    sets = [("plain", src)]
    if args.gzip:
        gz = root / "kineto-gz"
        gz.mkdir(exist_ok=True)
        if not any(gz.iterdir()):  # a reused set keeps its gzip'd copy too
            for f in src.iterdir():
                target = gz / (f.name + ".gz")
                with open(f, "rb") as a, gzip.open(target, "wb", compresslevel=6) as b:
                    shutil.copyfileobj(a, b, 1 << 20)
        gz_size = sum(f.stat().st_size for f in gz.iterdir())
        print(f"gzip'd: {gz_size / 1e9:.2f} GB on disk")
        sets.append(("gzip", gz))
    try:
        for label, folder in sets:
            rates, rss, parse = [], [], []
            for i in range(args.repeats):
                result = run_child(CHILD, str(folder), str(out))
                rate, peak = size / 1e6 / result["seconds"], result["rss_mb"]
                rates.append(rate)
                rss.append(peak)
                base = run_child(PARSE_ONLY, str(folder))
                parse.append(size / 1e6 / base["seconds"])
                print(
                    f"  {label} run {i + 1}: {result['seconds']:.1f} s, {rate:.0f} MB/s "
                    f"(uncompressed), {result['events'] / result['seconds']:,.0f} collectives/s, "
                    f"peak RSS {peak:.0f} MB; ijson alone {parse[-1]:.0f} MB/s"
                )
            print(
                f"{label}: median {statistics.median(rates):.0f} MB/s, peak RSS max "
                f"{max(rss):.0f} MB, conversion/ijson-alone speed ratio "
                f"{statistics.median(r / q for r, q in zip(rates, parse, strict=True)):.2f}"
            )
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
