"""Trace schema v1: file names, columns and the per-rank metadata keys.

A run directory holds, for every rank ``R`` (zero-padded to five digits):

* ``rank-R.meta.json``   run metadata seen from that rank (rewritten atomically);
* ``rank-R.events.arrow`` collective / point-to-point events (Arrow IPC stream);
* ``rank-R.steps.arrow``  iteration boundaries (Arrow IPC stream).

Timestamps are nanoseconds on rank 0's clock (see ``docs/trace-format.md``).
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_NAME = "syncpace.trace"
SCHEMA_VERSION = 1

META_SUFFIX = ".meta.json"
EVENTS_SUFFIX = ".events.arrow"
STEPS_SUFFIX = ".steps.arrow"

EVENTS = pa.schema(
    [
        ("rank", pa.int32()),
        ("step", pa.int64()),
        ("group", pa.string()),
        ("group_size", pa.int32()),
        ("seq", pa.int64()),
        ("op", pa.string()),
        ("bytes", pa.int64()),
        ("dtype", pa.string()),
        ("peer", pa.int32()),
        ("enter_ns", pa.int64()),
        ("exit_ns", pa.int64()),
        ("timing", pa.string()),
    ],
    metadata={"schema": SCHEMA_NAME, "schema_version": str(SCHEMA_VERSION), "table": "events"},
)

STEPS = pa.schema(
    [
        ("rank", pa.int32()),
        ("step", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("pacing_delay_ns", pa.int64()),
    ],
    metadata={"schema": SCHEMA_NAME, "schema_version": str(SCHEMA_VERSION), "table": "steps"},
)

#: Canonical op names. Every API that issues the same wire operation maps to one name
#: (``all_gather_into_tensor``, ``all_gather_single`` and ``all_gather`` are all
#: ``all_gather``), so analysis groups by what travels, not by how it was called.
OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
    "barrier",
    "send",
    "recv",
)

#: How ``exit_ns`` was obtained.
TIMING_SOURCES = (
    "wait",  # wait() returned, or is_completed() first saw the work done
    "future",  # completion callback of the work's future (when the caller used it)
    "call",  # the call returned (coalesced calls that return no work)
    "unobserved",  # the work was dropped without its completion being observed
    "cuda_event",  # CUDA events around the collective on its stream (device time)
    "nccl_hook",  # NCCL completion hook (watchdog saw the device finish)
    "simulated",  # written by the simulator
)

#: Keys every ``rank-R.meta.json`` must carry.
REQUIRED_META_KEYS = ("schema", "schema_version", "rank", "world_size", "host")

NO_PEER = -1


def rank_stem(rank: int) -> str:
    return f"rank-{rank:05d}"
