"""Trace schema v3: file names, the tables' Arrow schemas and the per-rank metadata keys.

A run directory holds, for every rank ``R`` (zero-padded to five digits):

* ``rank-R.meta.json``   run metadata seen from that rank (rewritten atomically);
* ``rank-R.events.arrow`` collective / point-to-point events (Arrow IPC stream);
* ``rank-R.steps.arrow``  iteration boundaries (Arrow IPC stream).

The columns themselves are declared once, in :mod:`syncpace.trace.columns`.
Timestamps are nanoseconds on rank 0's clock (see ``docs/trace-format.md``). Older
traces are still read: version 1 lacks ``status``, ``error`` and ``wait_ns``, version 2
the device times; the reader fills what is missing (:func:`upgrade_events`).
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from syncpace.trace import columns

SCHEMA_NAME = "syncpace.trace"
SCHEMA_VERSION = 4
#: Versions this syncpace reads.
READABLE_VERSIONS = (1, 2, 3, 4)

META_SUFFIX = ".meta.json"
EVENTS_SUFFIX = ".events.arrow"
STEPS_SUFFIX = ".steps.arrow"
#: Live detections (one JSON object a line), written by the in-job monitor.
MONITOR_SUFFIX = ".monitor.jsonl"
#: Per-step summaries of one rank for the whole run (always-on mode), beside the events.
SUMMARY_SUFFIX = ".summary.arrow"
#: Per-direction link counters of a run on the emulated fabric (``syncpace.fabric.counters``).
LINKS_FILE = "fabric-links.arrow"

EVENTS = columns.arrow_schema(columns.EVENT_COLUMNS, "events", SCHEMA_VERSION, SCHEMA_NAME)
STEPS = columns.arrow_schema(columns.STEP_COLUMNS, "steps", SCHEMA_VERSION, SCHEMA_NAME)
#: One row per rank and step, derived from that step's events as they are written: what
#: stays of every step after its events have rotated out (always-on mode).
SUMMARY = columns.arrow_schema(columns.SUMMARY_COLUMNS, "summary", SCHEMA_VERSION, SCHEMA_NAME)
#: Columns holding times, shifted onto rank 0's clock when written.
EVENT_TIME_COLUMNS = columns.time_columns(columns.EVENT_COLUMNS)
STEP_TIME_COLUMNS = columns.time_columns(columns.STEP_COLUMNS)


def events_schema(version: int) -> pa.Schema:
    """The events columns as files of ``version`` hold them (one of READABLE_VERSIONS)."""
    return _EVENTS_BY_VERSION[version]


def steps_schema(version: int) -> pa.Schema:
    """The steps columns as files of ``version`` hold them."""
    return _STEPS_BY_VERSION[version]


_EVENTS_BY_VERSION = {
    v: columns.arrow_schema(columns.EVENT_COLUMNS, "events", v, SCHEMA_NAME)
    for v in READABLE_VERSIONS
}
_STEPS_BY_VERSION = {
    v: columns.arrow_schema(columns.STEP_COLUMNS, "steps", v, SCHEMA_NAME)
    for v in READABLE_VERSIONS
}

#: Canonical op names. Every API that issues the same wire operation maps to one name
#: (``all_gather_into_tensor``, ``all_gather_single`` and ``all_gather`` are all
#: ``all_gather``), so analysis groups by what travels, not by how it was called.
#: Each name's code in the crash journal. Append-only: a code already on disk never
#: changes meaning (``tests/trace/test_columns.py`` holds the codes of every release).
OP_CODES = {
    "all_reduce": 1,
    "all_gather": 2,
    "reduce_scatter": 3,
    "broadcast": 4,
    "reduce": 5,
    "gather": 6,
    "scatter": 7,
    "all_to_all": 8,
    "barrier": 9,
    "send": 10,
    "recv": 11,
}
OPS = tuple(OP_CODES)

#: How ``exit_ns`` was obtained, and each source's journal code (append-only, like
#: ``OP_CODES``).
TIMING_CODES = {
    "wait": 1,  # wait() returned, or is_completed() first saw the work done
    "future": 2,  # completion callback of the work's future (when the caller used it)
    "call": 3,  # the call returned (coalesced calls that return no work)
    "unobserved": 4,  # the work was dropped without its completion being observed
    "cuda_event": 5,  # CUDA events around the collective on its stream (device time)
    "nccl_hook": 6,  # NCCL completion hook (watchdog saw the device finish)
    "simulated": 7,  # written by the simulator
    # Imported from other tools' traces (docs/imports.md); a row's enter and exit always
    # come from one source:
    "profiler_host": 8,  # PyTorch profiler: the c10d call began / gloo's work span ended
    "profiler_call": 9,  # PyTorch profiler: the call began / returned (no completion seen)
    "profiler_device": 10,  # PyTorch profiler: the NCCL kernel's start / end on the GPU
    "inspector_kernel_gpu": 11,  # NCCL Inspector: kernel time from the GPU's global timer
    "inspector_kernel_cpu": 12,  # NCCL Inspector: kernel start/stop as the host saw them
    "inspector_collective_cpu": 13,  # NCCL Inspector: the collective's host-side start/stop
    "inspector_unknown": 14,  # NCCL Inspector records older than coll_timing_source
}
TIMING_SOURCES = tuple(TIMING_CODES)

#: What became of a call (``status``), and each status's journal code (append-only).
#: Every status but ``completed`` describes a call whose ``exit_ns`` is not a completion
#: time: when it failed, or ``-1``.
STATUS_CODES = {
    "completed": 1,  # the work finished and its completion was observed
    "failed": 2,  # the call or its wait raised; ``error`` holds "Type: message"
    "timed_out": 3,  # the wait raised a timeout (the backend's or the caller's)
    "aborted": 4,  # the process group was aborted or shut down with the work in flight
    "unobserved": 5,  # the work was dropped without its completion being observed
    "pending": 6,  # entered, and the trace ended (crash, hang, kill) before it completed
}
STATUSES = tuple(STATUS_CODES)


#: Keys every ``rank-R.meta.json`` must carry.
REQUIRED_META_KEYS = ("schema", "schema_version", "rank", "world_size", "host")

NO_PEER = -1

#: Key of a batch's custom metadata (and of the metadata file) holding its checksum.
CHECKSUM_KEY = "crc32"
#: Key of a batch's custom metadata holding, for a batch made from the crash journal,
#: the first journal sequence number it does not cover (see ``trace/journal.py``).
JOURNAL_HI_KEY = "journal_hi"


try:
    # ISA-L's CRC-32 (the same polynomial as zlib's, carry-less multiplication): 10x
    # faster, and a batch's checksum was a third of the time of reading it.
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - a platform without a wheel
    _crc32 = zlib.crc32


def batch_checksum(batch: pa.RecordBatch) -> str:
    """CRC-32 of a batch's row count and every buffer of its columns, as 8 hex digits.

    Written with every batch (its custom metadata) and checked on reading: a flipped
    byte in a value is otherwise a valid, wrong value. A column without nulls is
    summed without its validity bitmap: the IPC writer leaves an all-valid bitmap out
    (what ``take`` makes, for one), so the file's batch would otherwise not match."""
    crc = _crc32(batch.num_rows.to_bytes(8, "little"))
    for column in batch.columns:
        buffers = column.buffers()
        for buffer in buffers[1:] if column.null_count == 0 else buffers:
            if buffer is not None:
                crc = _crc32(buffer, crc)
    return f"{crc:08x}"


def decoded_checksum(batch: pa.RecordBatch) -> str:
    """:func:`batch_checksum` of a batch as the IPC reader decodes it, 40 % cheaper: the
    reader leaves out the validity bitmap of a column without nulls, so every buffer
    there is summed, and one call lists them all (a column's wrapper costs a
    microsecond, and a trace has a batch every thousand rows)."""
    crc = _crc32(batch.num_rows.to_bytes(8, "little"))
    for buffer in batch.to_struct_array().buffers():
        if buffer is not None:
            crc = _crc32(buffer, crc)
    return f"{crc:08x}"


def rank_stem(rank: int) -> str:
    return f"rank-{rank:05d}"


def segment_name(rank: int, index: int) -> str:
    """The events file of one segment of a rank's rotated trace (always-on mode):
    ``rank-00003.events.000017.arrow``. Segment 0 is the plain events file."""
    if index == 0:
        return f"{rank_stem(rank)}{EVENTS_SUFFIX}"
    return f"{rank_stem(rank)}.events.{index:06d}.arrow"


#: A segment file's name: rank and index.
SEGMENT_RE = re.compile(r"^rank-(\d{5,})\.events\.(\d{6})\.arrow$")


def upgrade_events(table: pa.Table, version: int) -> pa.Table:
    """An events table of an older ``version`` with the columns it lacks appended:
    each column's ``fill`` (``wait_ns`` and the device times -1: not recorded), except
    version 1's ``status``, derived: ``unobserved`` where ``exit_ns`` is -1 and
    ``completed`` elsewhere."""
    return _upgrade(table, version, columns.EVENT_COLUMNS)


def upgrade_steps(table: pa.Table, version: int) -> pa.Table:
    """A steps table of an older ``version`` with the columns it lacks appended (no
    delay on the device)."""
    return _upgrade(table, version, columns.STEP_COLUMNS)


def _upgrade(table: pa.Table, version: int, declared: tuple[columns.Column, ...]) -> pa.Table:
    n = table.num_rows
    for column in declared:
        if column.since <= version or column.name in table.column_names:
            continue
        if column.name == "status":
            derived = pc.if_else(pc.less(table.column("exit_ns"), 0), "unobserved", "completed")
            values = derived.cast(column.type)
        elif column.fill is None:
            values = pa.nulls(n, column.type)
        else:
            values = pa.array(np.full(n, column.fill), type=column.type)
        table = table.append_column(pa.field(column.name, column.type), values)
    return table


def meta_checksum(meta: dict) -> str:
    """CRC-32 of the metadata's content (every key but the checksum), canonically
    encoded (compact, keys sorted): a hand edit or a flipped byte shows."""
    content = {k: v for k, v in meta.items() if k != CHECKSUM_KEY}
    return f"{zlib.crc32(msgspec.json.encode(content, order='sorted')):08x}"


# Host files ------------------------------------------------------------------------
# One sampler per host writes, next to the rank files (see docs/telemetry.md):
#
# * ``host-H.meta.json``      the host's facts: NICs, PCIe topology, GPUs, the sampler;
# * ``host-H.counters.arrow`` counter series of the host (Arrow IPC stream);
# * ``host-H.rank-R.pid``     rank R's process id, for the sampler to measure each rank.
#
# ``H`` is the host name with every character outside ``[A-Za-z0-9._-]`` as ``_``; the
# real name is in the file (``host`` key and column).

HOST_PREFIX = "host-"
HOST_META_SUFFIX = ".meta.json"
COUNTERS_SUFFIX = ".counters.arrow"
HOST_SCHEMA_NAME = "syncpace.host"
HOST_SCHEMA_VERSION = 1

#: One row per (series, sample) where the series' value changed, plus both ends of
#: every span in which it stayed the same (the first and last sample, and the sample
#: before each change): consecutive rows of one series give exact per-interval rates.
COUNTERS = pa.schema(
    [
        ("time_ns", pa.int64()),  # rank 0's clock, like every *_ns column of the trace
        ("host", pa.string()),
        ("source", pa.string()),  # COUNTER_SOURCES
        ("device", pa.string()),  # NIC, IB device, GPU PCI bus id; "" for host-wide series
        ("port", pa.int32()),  # IB port number; -1 elsewhere
        ("counter", pa.string()),
        ("value", pa.int64()),
    ],
    metadata={"schema": HOST_SCHEMA_NAME, "schema_version": "1", "table": "counters"},
)

#: Where a series comes from, and whether its counters are cumulative (``counter``) or
#: a reading of the moment (``gauge``); gauges of a source are listed by name.
COUNTER_SOURCES = {
    "nic": "/proc/net/dev (the counters of /sys/class/net/*/statistics), per interface",
    "qdisc": "root queueing discipline of each interface (netlink, as tc -s qdisc)",
    "tcp": "/proc/net/snmp Tcp: fields, host-wide (the host's network namespace)",
    "udp": "/proc/net/snmp Udp: fields",
    "tcpext": "/proc/net/netstat TcpExt: fields",
    "ipext": "/proc/net/netstat IpExt: fields",
    "ib": "/sys/class/infiniband/*/ports/*/counters (data counters in 4-byte words)",
    "ib_hw": "/sys/class/infiniband/*/ports/*/hw_counters (RoCE congestion, retries)",
    "gpu": "NVML, per GPU (device = PCI bus id)",
    "cpu": "/proc/stat CPU time by state (ns) and /proc/pressure/cpu, host-wide; each "
    "rank's threads' run and run-queue wait (device rankR)",
    "cgroup": "the sampling rank's cgroup CPU controller: periods, throttling, quota",
    "sampler": "the sampler itself: ticks, late ticks, its own CPU time",
}
GAUGES = {
    "nic": {"link_rate_bps", "speed_mbps", "oper_up", "mtu"},
    "cpu": {"cpus"},
    "cgroup": {"quota_millicpu"},
    "qdisc": {"backlog_bytes", "qlen", "rate_bps"},
    "tcp": {"CurrEstab"},
    "ib": {"rate_bps", "state", "phys_state"},
    "gpu": {
        "sm_clock_mhz",
        "mem_clock_mhz",
        "max_sm_clock_mhz",
        "power_mw",
        "power_limit_mw",
        "temperature_c",
        "throttle_reasons",
        "utilization_pct",
        "mem_utilization_pct",
    },
}


def is_gauge(source: str, counter: str) -> bool:
    return counter in GAUGES.get(source, ())


def host_stem(host: str) -> str:
    """``host-H``: the host name made safe as a file name."""
    safe = "".join(c if c.isalnum() and c.isascii() or c in "._-" else "_" for c in host)
    return HOST_PREFIX + (safe or "_")


def rank_pid_name(host: str, rank: int | str) -> str:
    """``host-H.rank-R.pid``: where rank ``rank`` leaves its process id for its host's
    sampler (``rank`` ``*``: the glob of them all)."""
    return f"{host_stem(host)}.rank-{rank}.pid"


def events_table(values: Any) -> pa.Table:
    """An events table from named columns (see :func:`columns.conform`)."""
    return columns.conform(values, columns.EVENT_COLUMNS, EVENTS)


def steps_table(values: Any) -> pa.Table:
    """A steps table from named columns (see :func:`columns.conform`)."""
    return columns.conform(values, columns.STEP_COLUMNS, STEPS)
