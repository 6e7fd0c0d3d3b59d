"""Write a simulated run as a trace directory in the current trace schema.

Arrow IPC streams are written directly (one record batch per file), with the same
schemas and file names as :class:`~syncpace.trace.writer.RankTraceWriter`, because a
writer thread per rank would dominate at thousands of ranks. Above ``max_ranks`` only
whole nodes, evenly spaced, are written; the metadata keeps the true world size and
lists the written ranks under ``sampled_ranks`` (the analysis then reports the others
as missing).

**Two clocks.** When the workload models its host (``WorkloadSpec.host_modelled``: a host
time above 0 or the pacer's delay slept on the host), the columns are what the tracer
writes on a GPU: ``enter_ns`` and ``exit_ns`` the host's issue of each call and when it
saw it through (the end of backward's issue, where DDP waits), the steps' ``start_ns``
and ``end_ns`` the host's iteration boundaries (when it had issued the previous and this
iteration), and ``device_enter_ns`` / ``device_exit_ns`` the device's times. Otherwise
the host never limits and is not written: the simulated (device) times stay in
``enter_ns`` / ``exit_ns`` and the steps' bounds, the device columns read -1, and the
trace is the one written before there was a host, so analyses that read the host columns
see the same arrivals. ``device_delay_ns`` is the step's delay when the pacer placed it
on the device.
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
    clocks = _clocks(result)
    delay = np.round(result.delay_s * 1e9).astype(np.int64)
    on_device = delay if result.config.workload.pacing_on == "device" else np.zeros_like(delay)
    dtype = result.config.workload.comm_dtype
    op = result.config.workload.op
    n = iters * buckets
    for rank in ranks.tolist():
        calls = {name: times[:, :, rank].reshape(-1) for name, times in clocks["events"].items()}
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
                    **calls,
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
                    "start_ns": clocks["start_ns"][:, rank],
                    "end_ns": clocks["end_ns"][:, rank],
                    "pacing_delay_ns": delay[:, rank],
                    "device_delay_ns": on_device[:, rank],
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


def _clocks(result: SimResult) -> dict[str, Any]:
    """The time columns, in ns: ``events`` (name to an (I, K, R) array), ``start_ns`` and
    ``end_ns`` ((I, R)). Host and device clocks when the host is modelled; otherwise the
    device's times in the host columns and no device columns (they read -1)."""
    assert result.enter_s is not None and result.exit_s is not None
    if not result.config.workload.host_modelled:
        return {
            "events": {"enter_ns": ns(result.enter_s), "exit_ns": ns(result.exit_s)},
            "start_ns": ns(result.start_s),
            "end_ns": ns(result.end_s),
        }
    host_enter, host_exit = result.host_calls_s()
    slept = np.round(result.host_delay_s() * 1e9).astype(np.int64)
    bounds = _boundaries(ns(result.host_end_s()), slept)
    return {
        "events": {
            "enter_ns": ns(host_enter),
            "exit_ns": ns(host_exit),
            "device_enter_ns": ns(result.enter_s),
            "device_exit_ns": ns(result.exit_s),
        },
        "start_ns": bounds[:-1],
        "end_ns": bounds[1:],
    }


def _boundaries(ends: np.ndarray, slept: np.ndarray) -> np.ndarray:
    """(I + 1, R) iteration boundaries from the run's start and the (I, R) ends, each at
    least the step's host sleep after the one before: the format holds a slept delay
    within its step, and rounding each end to the ns on its own could miss that by 1 ns.

    ``E_i = max(ends_i, E_{i-1} + slept_i)``, in closed form with ``C`` the running sum
    of ``slept``: ``E_i = C_i + max_{j <= i}(ends_j - C_j)``."""
    ends = np.vstack([np.full((1, ends.shape[1]), T0_NS, dtype=np.int64), ends])
    total = np.cumsum(np.vstack([np.zeros((1, ends.shape[1]), dtype=np.int64), slept]), axis=0)
    return total + np.maximum.accumulate(ends - total, axis=0)


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
