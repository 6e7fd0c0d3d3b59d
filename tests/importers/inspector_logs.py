"""NCCL Inspector logs built to the plugin's format from a real run's timings.

No GPU here, so no NCCL: the logs are written the way NCCL's Inspector plugin writes
them (``ext-profiler/inspector/inspector.cc``, output format ``v4.0``: one JSON object
per line with ``header``, ``metadata``, ``coll_perf``; ``event_trace_sn`` and
``event_trace_ts`` with verbose on), from the collectives a syncpace-traced gloo run
actually made. What NCCL would have measured is derived the way NCCL behaves:

* a collective's kernel starts when its stream reaches it: at the call, or when the
  previous collective of the communicator finished, whichever is later; it ends when the
  collective completes (the run's observed completion);
* ``coll_exec_time_us`` is that kernel time (µs, truncated, as the plugin divides ns by
  1000), ``coll_msg_size_bytes`` the per-rank count times the element size (so an
  all-gather's is 1/n of the gathered total), algbw and busbw as the plugin computes
  them;
* the dump thread wakes every ``interval_us`` and writes, per communicator, only the
  latest completed collective (interval 0: every collective, right after it ends).
"""

from __future__ import annotations

import json
import random
import zlib
from collections import defaultdict
from pathlib import Path

from nccl_emulation import nccl_kernels

from syncpace.trace.reader import Trace

_FUNC = {
    "all_reduce": "AllReduce",
    "broadcast": "Broadcast",
    "reduce": "Reduce",
    "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter",
}


def comm_id(group: str) -> str:
    return f"0x{zlib.crc32(group.encode()):x}{len(group):04x}"


def _bandwidths(func: str, size: int, nranks: int, exec_us: int) -> tuple[float, float]:
    """algbw and busbw (GB/s) as the plugin's inspectorComputeCollBw computes them."""
    seconds = exec_us / 1e6
    if func in ("AllGather", "ReduceScatter"):
        traffic, factor = size * nranks, (nranks - 1) / nranks
    elif func == "AllReduce":
        traffic, factor = size, 2 * (nranks - 1) / nranks
    else:
        traffic, factor = size, 1.0
    algbw = traffic / 1e9 / seconds if seconds else 0.0
    return algbw, algbw * factor


def write_logs(
    trace: Trace,
    out_dir: Path,
    *,
    interval_us: int = 0,
    verbose: bool = False,
    host_offset_us: dict[int, int] | None = None,
    hosts: dict[int, str] | None = None,
    seed: int = 0,
) -> dict[str, int]:
    """Write one ``<host>-pid<pid>.log`` per rank; returns records written per op."""
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    offsets = host_offset_us or {}
    written: dict[str, int] = defaultdict(int)
    kernels = nccl_kernels(trace, list(_FUNC))
    for rank, meta in sorted(trace.meta.items()):
        host = (hosts or {}).get(rank, str(meta.get("host", "node")))
        pid = int(meta.get("pid") or 1000 + rank)
        groups = meta.get("groups") or {}
        shift = offsets.get(rank, 0)
        lines = []
        own = kernels.filter(kernels["rank"] == rank)
        for (group,), calls in own.group_by(["group"], maintain_order=True):
            ranks = (groups.get(group) or {}).get("ranks") or list(range(trace.world_size))
            nranks = len(ranks)
            completed = sorted(calls.iter_rows(named=True), key=lambda row: row["k_end"])
            for row, dump_us in _dumps(completed, interval_us, rng):
                func = _FUNC[row["op"]]
                size = row["bytes"]
                if func in ("AllGather", "ReduceScatter"):
                    size //= nranks
                exec_us = (row["k_end"] - row["k_start"]) // 1000
                algbw, busbw = _bandwidths(func, size, nranks, exec_us)
                perf = {
                    "coll": func,
                    "coll_sn": row["seq"] + 1,
                    "coll_msg_size_bytes": size,
                    "coll_exec_time_us": exec_us,
                    "coll_timing_source": "kernel_gpu",
                    "coll_algobw_gbs": round(algbw, 6),
                    "coll_busbw_gbs": round(busbw, 6),
                }
                if verbose:
                    perf.update(_event_trace(row, shift, rng))
                record = {
                    "header": {
                        "id": comm_id(group),
                        "rank": ranks.index(rank),
                        "n_ranks": nranks,
                        "nnodes": len({(hosts or {}).get(r, "node") for r in ranks}),
                    },
                    "metadata": {
                        "inspector_output_format_version": "v4.0",
                        "git_rev": "",
                        "rec_mechanism": "nccl_profiler_interface",
                        "dump_timestamp_us": dump_us + shift,
                        "hostname": host,
                        "pid": pid,
                    },
                    "coll_perf": perf,
                }
                lines.append((dump_us, json.dumps(record)))
                written[row["op"]] += 1
        lines.sort(key=lambda item: item[0])
        (out_dir / f"{host}-pid{pid}.log").write_text("".join(text + "\n" for _, text in lines))
    return dict(written)


def _dumps(completed: list[dict], interval_us: int, rng: random.Random) -> list[tuple[dict, int]]:
    """What the dump thread writes: per wake-up, the latest completed collective if it is
    new (interval 0: each collective a few µs after it ends)."""
    if interval_us <= 0:
        return [(row, row["k_end"] // 1000 + rng.randrange(5, 60)) for row in completed]
    picks: list[tuple[dict, int]] = []
    if not completed:
        return picks
    t = completed[0]["k_end"] // 1000 + rng.randrange(interval_us)
    end = completed[-1]["k_end"] // 1000 + interval_us
    i, last = 0, None
    while t <= end:
        while i < len(completed) and completed[i]["k_end"] // 1000 <= t:
            i += 1
        if i and completed[i - 1] is not last:
            last = completed[i - 1]
            picks.append((last, t))
        t += interval_us
    return picks


def _event_trace(row: dict, shift_us: int, rng: random.Random) -> dict:
    """The verbose record's event trace: host-clock µs of the collective's enqueue and of
    two channels' kernel start and stop (seen by the host a few µs apart)."""
    enq = row["enter_ns"] // 1000 + shift_us
    k0, k1 = row["k_start"] // 1000 + shift_us, row["k_end"] // 1000 + shift_us
    channels = [(c, k0 + rng.randrange(0, 3), k1 + rng.randrange(0, 3)) for c in range(2)]
    return {
        "event_trace_sn": {
            "coll_start_sn": 1,
            "coll_stop_sn": 2,
            "kernel_events": [
                {
                    "channel_id": c,
                    "kernel_start_sn": 3 + 3 * c,
                    "kernel_stop_sn": 5 + 3 * c,
                    "kernel_record_sn": 4 + 3 * c,
                }
                for c, _, _ in channels
            ],
        },
        "event_trace_ts": {
            "coll_start_ts": enq,
            "coll_stop_ts": enq + 4,
            "kernel_events": [
                {"channel_id": c, "kernel_start_ts": a, "kernel_stop_ts": b, "kernel_record_ts": b}
                for c, a, b in channels
            ],
        },
    }
