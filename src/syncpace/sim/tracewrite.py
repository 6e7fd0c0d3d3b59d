"""Write a simulated run as a trace directory in the current trace schema.

Arrow IPC streams are written directly (one record batch per file), with the same
schemas and file names as :class:`~syncpace.trace.writer.RankTraceWriter`, because a
writer thread per rank would dominate at thousands of ranks. Above ``max_ranks`` only
whole nodes, evenly spaced, are written; the metadata keeps the true world size and
lists the written ranks under ``sampled_ranks`` (the analysis then reports the others
as missing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from syncpace import __version__
from syncpace.sim.engine import SimResult
from syncpace.trace import schema

T0_NS = 1_000_000_000  # the run starts 1 s into rank 0's clock, like the other producers


def ns(seconds: np.ndarray) -> np.ndarray:
    return (T0_NS + np.round(np.asarray(seconds) * 1e9)).astype(np.int64)


def written_ranks(result: SimResult, max_ranks: int) -> np.ndarray:
    spec = result.config.topology
    if max_ranks <= 0 or spec.world_size <= max_ranks:
        return np.arange(spec.world_size)
    keep = max(1, max_ranks // spec.gpus_per_node)
    nodes = np.unique(np.linspace(0, spec.nodes - 1, keep).round().astype(int))
    return (nodes[:, None] * spec.gpus_per_node + np.arange(spec.gpus_per_node)).reshape(-1)


def write_trace(result: SimResult, out_dir: str | os.PathLike[str], max_ranks: int = 0) -> Path:
    """Write ``result`` (which must have recorded events) to ``out_dir``."""
    if result.enter_s is None or result.exit_s is None:
        raise ValueError("the run was simulated without record_events; nothing to write")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ranks = written_ranks(result, max_ranks)
    sampled = None if ranks.size == result.world_size else ranks.tolist()
    iters, buckets = result.comm_s.shape
    steps_idx = np.repeat(np.arange(iters, dtype=np.int64), buckets)
    seq = np.arange(iters * buckets, dtype=np.int64)
    nbytes = np.tile(result.bucket_bytes.astype(np.int64), iters)
    enter, exits = ns(result.enter_s), ns(result.exit_s)
    start, end, delay = ns(result.start_s), ns(result.end_s), np.round(result.delay_s * 1e9)
    dtype = result.config.workload.comm_dtype
    op = result.config.workload.op
    n = iters * buckets
    for rank in ranks.tolist():
        events = (
            schema.events_table(
                {
                    "rank": np.full(n, rank, dtype=np.int32),
                    "step": steps_idx,
                    "group": ["0"] * n,
                    "group_size": np.full(n, result.world_size, dtype=np.int32),
                    "seq": seq,
                    "op": [op] * n,
                    "bytes": nbytes,
                    "dtype": [dtype] * n,
                    "peer": np.full(n, schema.NO_PEER, dtype=np.int32),
                    "enter_ns": enter[:, :, rank].reshape(-1),
                    "exit_ns": exits[:, :, rank].reshape(-1),
                    "timing": ["simulated"] * n,
                    "status": ["completed"] * n,
                }
            )
            .combine_chunks()
            .to_batches()[0]
        )
        steps = (
            schema.steps_table(
                {
                    "rank": np.full(iters, rank, dtype=np.int32),
                    "step": np.arange(iters, dtype=np.int64),
                    "start_ns": start[:, rank],
                    "end_ns": end[:, rank],
                    "pacing_delay_ns": delay[:, rank].astype(np.int64),
                }
            )
            .combine_chunks()
            .to_batches()[0]
        )
        stem = out / schema.rank_stem(rank)
        _write_stream(Path(f"{stem}{schema.EVENTS_SUFFIX}"), events)
        _write_stream(Path(f"{stem}{schema.STEPS_SUFFIX}"), steps)
        meta = _meta(result, rank, n, iters, sampled)
        Path(f"{stem}{schema.META_SUFFIX}").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return out


def _write_stream(path: Path, batch: pa.RecordBatch) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)


def _meta(result: SimResult, rank: int, events: int, steps: int, sampled: Any) -> dict[str, Any]:
    spec = result.config.topology
    node, local = divmod(rank, spec.gpus_per_node)
    meta: dict[str, Any] = {
        "schema": schema.SCHEMA_NAME,
        "schema_version": schema.SCHEMA_VERSION,
        "tool_version": __version__,
        "rank": rank,
        "world_size": result.world_size,
        "host": f"node{node}",
        "node_rank": node,
        "local_rank": local,
        "local_world_size": spec.gpus_per_node,
        "pid": 0,
        "device": f"cuda:{local}",
        "backend": "nccl",
        "topology": {
            "simulated": result.topology.describe(),
            "far_from_nic": local in spec.far_gpus,
        },
        "clock": {"offset_ns": 0, "uncertainty_ns": 0, "samples": []},
        "groups": {"0": {"ranks": list(range(result.world_size)), "backend": "nccl"}},
        "config": result.config.to_json(),
        "started_ns": T0_NS,
        "finished": True,
        "events_written": events,
        "steps_written": steps,
        "dropped_events": 0,
        "source": "simulator",
        "timing": "simulated",
    }
    if sampled is not None:
        meta["sampled_ranks"] = sampled
    return meta
