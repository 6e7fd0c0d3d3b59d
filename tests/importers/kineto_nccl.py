"""PyTorch profiler traces of an NCCL job, built to torch's format from a real run.

No GPU here, so no NCCL job to profile. These files are what ``torch.profiler`` with
CUDA activities writes for one (the keys are torch's ``saveNcclMeta`` names, the kernel
names NCCL's): per collective the ``c10d::`` op, inside it ``record_param_comms`` with
the collective's metadata and ``nccl:<op>``, a ``cudaLaunchKernel`` runtime event and
the ``ncclDevKernel_*`` kernel on the GPU, linked by ``External id`` and
``correlation``. Newer torch also copies the metadata onto the kernel
(``kernel_metadata=True``); older traces (``kernel_metadata=False``) link by id only.
Times come from a syncpace-traced gloo run, with NCCL's stream semantics
(``nccl_emulation``); between collectives ``aten::`` ops stand for compute.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from nccl_emulation import nccl_kernels

from syncpace.trace.reader import Trace

BASE_NS = 1_700_000_000_000_000_000

#: trace op -> (record_param_comms name, NCCL kernel function)
_NAMES = {
    "all_reduce": ("allreduce", "AllReduce_Sum_f32_RING_LL"),
    "all_gather": ("_allgather_base", "AllGather_RING_LL"),
    "reduce_scatter": ("_reduce_scatter_base", "ReduceScatter_Sum_f32_RING_LL"),
    "broadcast": ("broadcast", "Broadcast_RING_LL"),
}
_C10D = {
    "all_reduce": "c10d::allreduce_",
    "all_gather": "c10d::_allgather_base_",
    "reduce_scatter": "c10d::_reduce_scatter_base_",
    "broadcast": "c10d::broadcast_",
}
_SCALAR = {"float32": ("Float", 4), "int64": ("Long", 8), "int32": ("Int", 4)}


def _us(ns: int) -> float:
    return round((ns - BASE_NS) / 1000, 3)


def write_traces(trace: Trace, out_dir: Path, *, kernel_metadata: bool = True) -> None:
    """One ``rank<N>.pt.trace.json`` per rank of ``trace``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    kernels = nccl_kernels(trace, list(_NAMES))
    for rank, meta in sorted(trace.meta.items()):
        groups = meta.get("groups") or {}
        pid, tid, stream = 1000 + rank, 1000 + rank, 20
        events: list[dict] = []
        ext = corr = 0
        own = kernels.filter(pl.col("rank") == rank).sort("enter_ns")
        last_end = None
        for row in own.iter_rows(named=True):
            ext += 1
            corr += 1
            name, kernel_fn = _NAMES[row["op"]]
            scalar, size = _SCALAR.get(row["dtype"], ("Float", 4))
            ranks = (groups.get(row["group"]) or {}).get("ranks") or list(range(trace.world_size))
            n = len(ranks)
            total = row["bytes"] // size
            in_n, out_n = total, total
            if row["op"] == "all_gather":
                in_n = total // n
            elif row["op"] == "reduce_scatter":
                out_n = total // n
            call = row["enter_ns"]
            if last_end is not None and call - last_end > 20_000:  # compute in between
                events.append(
                    _x(
                        "cpu_op",
                        "aten::addmm",
                        pid,
                        tid,
                        last_end + 2_000,
                        call - 2_000,
                        {"External id": 0, "Input Dims": [[16, 64]]},
                    )
                )
            meta_args = {
                "Collective name": name,
                "dtype": scalar,
                "In msg nelems": in_n,
                "Out msg nelems": out_n,
                "Group size": n,
                "In split size": "[]",
                "Out split size": "[]",
                "Global rank start": 0,
                "Global rank stride": 1,
                "Process Group Name": row["group"],
                "Process Group Description": "default_pg" if row["group"] == "0" else "undefined",
                "Process Group Ranks": str(ranks),
                "Rank": rank,
                "Seq": row["seq"] + 1,
            }
            events.append(
                _x(
                    "cpu_op",
                    _C10D[row["op"]],
                    pid,
                    tid,
                    call,
                    call + 60_000,
                    {"External id": ext, "Input Dims": [[[in_n]]]},
                )
            )
            events.append(
                _x(
                    "cpu_op",
                    "record_param_comms",
                    pid,
                    tid,
                    call + 2_000,
                    call + 50_000,
                    {"External id": ext + 100_000, **meta_args, "Is asynchronized op": True},
                )
            )
            events.append(
                _x(
                    "user_annotation",
                    f"nccl:{row['op']}",
                    pid,
                    tid,
                    call + 5_000,
                    call + 45_000,
                    {"External id": ext + 200_000},
                )
            )
            events.append(
                _x(
                    "cuda_runtime",
                    "cudaLaunchKernel",
                    pid,
                    tid,
                    call + 10_000,
                    call + 14_000,
                    {"External id": ext + 100_000, "correlation": corr},
                )
            )
            kernel_args = {
                "External id": ext + 100_000,
                "correlation": corr,
                "device": rank,
                "stream": stream,
                "grid": [2, 1, 1],
                "block": [640, 1, 1],
            }
            if kernel_metadata:
                kernel_args.update(meta_args)
            events.append(
                _x(
                    "kernel",
                    f"ncclDevKernel_{kernel_fn}(ncclDevKernelArgsStorage<4096ul>)",
                    rank,
                    stream,
                    row["k_start"],
                    row["k_end"],
                    kernel_args,
                )
            )
            last_end = call + 60_000
        steps = trace.steps.filter(pl.col("rank") == rank)
        for s in steps.iter_rows(named=True):
            events.append(
                _x(
                    "user_annotation",
                    f"ProfilerStep#{s['step']}",
                    pid,
                    tid,
                    s["start_ns"],
                    s["end_ns"],
                    {"External id": 0},
                )
            )
            events.append(
                _x(
                    "gpu_user_annotation",
                    f"ProfilerStep#{s['step']}",
                    rank,
                    stream,
                    s["start_ns"],
                    s["end_ns"],
                    {},
                )
            )
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": rank, "name": "NVIDIA H100 80GB HBM3"}],
            "distributedInfo": {
                "backend": "nccl",
                "rank": rank,
                "world_size": trace.world_size,
                "pg_count": len(groups),
                "pg_config": [
                    {
                        "pg_name": g,
                        "pg_desc": "default_pg" if g == "0" else "undefined",
                        "backend_config": "cuda:nccl",
                        "pg_size": len(spec["ranks"]),
                        "ranks": spec["ranks"],
                    }
                    for g, spec in groups.items()
                ],
                "nccl_version": "2.27.5",
            },
            "host_name": str(meta.get("host", "node")),
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": BASE_NS,
            "traceEvents": events,
            "traceName": f"rank{rank}.pt.trace.json",
        }
        (out_dir / f"rank{rank}.pt.trace.json").write_text(json.dumps(doc, indent=1))


def _x(cat: str, name: str, pid: int, tid: int, start: int, end: int, args: dict) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": _us(start),
        "dur": round((end - start) / 1000, 3),
        "args": args,
    }
