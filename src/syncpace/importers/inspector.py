"""NCCL Inspector logs: one JSON record per completed collective per communicator.

Written by NCCL's Inspector profiler plugin (``ext-profiler/inspector`` in NCCL's
repository). This reader follows output format ``v4.0`` (``inspector_output_format_version``)
as the plugin's ``inspector.cc`` writes it at NCCL commit ``1e0c869c``, and reads older
records without ``coll_timing_source``. Each process writes
``<hostname>-pid<pid>.log``; every record carries:

* ``header``: the communicator (``id``, a hash), the process's ``rank`` in it,
  ``n_ranks``, ``nnodes``;
* ``metadata``: ``hostname``, ``pid`` and ``dump_timestamp_us`` (when the record was
  written: after the collective completed, within one dump interval);
* ``coll_perf``: the collective (``coll``), its per-communicator sequence number
  (``coll_sn``), ``coll_msg_size_bytes`` (the per-rank count times the element size),
  ``coll_exec_time_us`` (the longest channel's kernel time, from the GPU's global timer
  when ``coll_timing_source`` is ``kernel_gpu``), algbw and busbw; with
  ``NCCL_INSPECTOR_DUMP_VERBOSE=1`` also ``event_trace_ts``: host-clock timestamps (µs)
  of the collective's start and stop and of each channel's kernel start and stop.

What follows from that:

* **Arrival from durations.** An NCCL kernel runs from the moment its rank's stream
  reaches it until the collective completes, which is nearly the same moment on every
  member. So a rank that arrived late has the *shortest* execution time. Each rank's
  exit is the instance's end (the host-observed kernel stop with verbose records; else
  the earliest dump timestamp of the instance, only a bound on the true end), and its
  enter is that exit minus its own execution time. Skews then rest on each GPU's own
  timer, not on comparing clocks.
* **Sampling.** The dump thread writes, per communicator and interval, only the latest
  completed collective: with an interval longer than the gap between collectives most
  of them are not in the logs (the trace counts what is missing).
* **No iterations, no dtype, no peers.** Steps are windows of ``window_ms``; point-to-
  point records (no peer is recorded) are left out and counted.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from syncpace.errors import TraceError
from syncpace.importers import jsonstream, sources
from syncpace.importers.contract import INPUT_COLUMNS, Conversion, OnBytes, RankFrame, Request

FORMAT = "nccl-inspector"
SUFFIXES = (".log", ".jsonl", ".json")

#: NCCL function name -> (op, nccl-tests bytes as a multiple of coll_msg_size_bytes: 1 or
#: the communicator size "n")
_OPS = {
    "AllReduce": ("all_reduce", 1),
    "Broadcast": ("broadcast", 1),
    "Reduce": ("reduce", 1),
    "AllGather": ("all_gather", "n"),
    "ReduceScatter": ("reduce_scatter", "n"),
}
_P2P = ("Send", "Recv", "SendRecv")
_TIMING = {"kernel_gpu", "kernel_cpu", "collective_cpu"}


def _int(value: Any, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _record(item: Any) -> tuple[dict, dict, dict] | None:
    if not isinstance(item, dict):
        return None
    header, meta, perf = item.get("header"), item.get("metadata"), item.get("coll_perf")
    if not (isinstance(header, dict) and isinstance(meta, dict) and isinstance(perf, dict)):
        return None
    return header, meta, perf


class InspectorConverter:
    """NCCL Inspector logs (files, or directories of ``*.log``, ``*.jsonl``, ``*.json``)."""

    options: tuple[str, ...] = ()

    def find(self, srcs: Sequence[Path]) -> list[Path]:
        return sources.find_files(srcs, SUFFIXES, "NCCL Inspector logs")

    def read(self, request: Request) -> Conversion:
        logs = _read(request.files, request.on_bytes)
        rank_of = _global_ranks(logs, request.files[0])
        frame = _frame(logs, rank_of)
        sampled = _sampling(frame)
        if sampled:
            logs.warnings.append(sampled)
        for what, n in sorted(logs.stats.items()):
            logs.warnings.append(f"{n} {what}")
        world = max(logs.comm_size.values())
        absent = sorted(set(range(world)) - set(rank_of.values()))
        if absent:
            logs.warnings.append(f"{len(absent)} of {world} ranks have no Inspector log: {absent}")
        verbose = bool(frame["verbose"].all())
        return Conversion(
            ranks=_rank_frames(frame, logs, rank_of),
            world_size=world,
            resolution_ns=1_000,
            missing=_missing(request.config.window_ms, verbose),
            warnings=logs.warnings,
            notes={
                "inspector_versions": dict(logs.versions),
                "verbose_records": int(frame["verbose"].sum()),
                "enter_from": "exit minus coll_exec_time_us",
            },
            # Without verbose records every member of an instance shares its end: the
            # clocks of the hosts are never compared. With them, hosts' clocks are
            # aligned as usual.
            clock_methods={} if verbose else {r: "common_end" for r in rank_of.values()},
        )


CONVERTER = InspectorConverter()

#: A process: (host name, pid).
_Proc = tuple[str, int]


@dataclass
class _Logs:
    """What the logs hold: a row per collective record, the processes and communicators
    the records name, and what was left out."""

    rows: list[tuple] = field(default_factory=list)  # _COLUMNS
    files: dict[_Proc, set[str]] = field(default_factory=lambda: defaultdict(set))
    proc_ids: dict[_Proc, int] = field(default_factory=dict)
    comm_size: dict[str, int] = field(default_factory=dict)
    comm_rank: dict[tuple[_Proc, str], int] = field(default_factory=dict)
    stats: Counter[str] = field(default_factory=Counter)
    versions: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)

    def add(self, path: Path, header: dict, meta: dict, perf: dict) -> None:
        """One record: its process and communicator, and its row if it is a collective."""
        proc = (str(meta.get("hostname", "unknown")), _int(meta.get("pid")))
        self.files[proc].add(str(path))
        self.versions[str(meta.get("inspector_output_format_version", "unknown"))] += 1
        comm = str(header.get("id", ""))
        n = _int(header.get("n_ranks"), 0)
        self.comm_size[comm] = max(self.comm_size.get(comm, 0), n)
        self.comm_rank[(proc, comm)] = _int(header.get("rank"))
        coll = str(perf.get("coll", ""))
        if coll in _P2P:
            self.stats["point-to-point records (the Inspector records no peer)"] += 1
        elif coll not in _OPS:
            self.stats[f"records of collective {coll!r} not understood"] += 1
        else:
            pid = self.proc_ids.setdefault(proc, len(self.proc_ids))
            self.rows.append((pid, comm, *_collective(coll, n, meta, perf)))


_COLUMNS = ["proc", "group", "op", "seq", "bytes", "exec_ns", "source", "stop", "call", "dump"]


def _collective(coll: str, n: int, meta: dict, perf: dict) -> tuple:
    """A record's row after its process and communicator (see ``_COLUMNS``)."""
    op, factor = _OPS[coll]
    size = _int(perf.get("coll_msg_size_bytes"), 0)
    stop, call = _trace_ts(perf.get("event_trace_ts"))
    return (
        op,
        _int(perf.get("coll_sn")),
        size * (n if factor == "n" else 1),
        max(_int(perf.get("coll_exec_time_us"), 0), 0) * 1000,
        str(perf.get("coll_timing_source") or "unknown"),
        stop,
        call,
        _int(meta.get("dump_timestamp_us")) * 1000,
    )


def _trace_ts(trace: Any) -> tuple[int, int]:
    """Verbose records' host-clock kernel stop and call (ns); -1 without them."""
    if not isinstance(trace, dict):
        return -1, -1
    kernels = [k for k in trace.get("kernel_events") or [] if isinstance(k, dict)]
    stops = [s for s in (_int(k.get("kernel_stop_ts")) for k in kernels) if s > 0]
    stop = max(stops) * 1000 if stops else _int(trace.get("coll_stop_ts")) * 1000
    return stop, _int(trace.get("coll_start_ts")) * 1000


def _read(files: Sequence[Path], on_bytes: OnBytes) -> _Logs:
    logs = _Logs()
    for path in files:
        records = 0
        for item in jsonstream.iter_values(path, on_bytes, logs.warnings):
            rec = _record(item)
            if rec is None:
                logs.stats["records that are not Inspector collectives"] += 1
                continue
            records += 1
            logs.add(path, *rec)
        if records == 0:
            logs.warnings.append(f"{path}: no Inspector records")
    if not logs.rows:
        raise TraceError(files[0], "no NCCL Inspector collective records in the given files")
    return logs


def _global_ranks(logs: _Logs, where: Path) -> dict[_Proc, int]:
    """A process's global rank: its rank in the largest communicator (the world's)."""
    world = max(logs.comm_size.values())
    rank_of: dict[_Proc, int] = {}
    for proc in logs.files:
        worlds = [
            (logs.comm_rank[(proc, c)], c)
            for c, n in logs.comm_size.items()
            if n == world and (proc, c) in logs.comm_rank
        ]
        if not worlds:
            raise TraceError(
                where,
                f"process {proc[0]} pid {proc[1]} has no record of a {world}-rank "
                "communicator: cannot tell its global rank",
            )
        rank_of[proc] = min(worlds)[0]
    if len(set(rank_of.values())) != len(rank_of):
        raise TraceError(where, "two processes claim the same rank in the world communicator")
    return rank_of


def _frame(logs: _Logs, rank_of: dict[_Proc, int]) -> pl.DataFrame:
    """Every record's row with its global rank, each instance's end and each rank's
    enter (see the module docstring); a record written twice counted and kept once."""
    frame = pl.DataFrame(logs.rows, schema=_COLUMNS, orient="row")
    by_id = {i: rank_of[proc] for proc, i in logs.proc_ids.items()}
    frame = frame.with_columns(
        rank=pl.col("proc").replace_strict(by_id, return_dtype=pl.Int32)
    ).drop("proc")
    dup = frame.height
    frame = frame.unique(subset=["rank", "group", "seq"], keep="first", maintain_order=True)
    if frame.height < dup:
        logs.stats["records written twice"] += dup - frame.height
    # The end of each instance: the host-observed kernel stop (verbose records), else the
    # earliest dump of the instance (the tightest bound the logs give).
    anchor = pl.col("dump").filter(pl.col("dump") > 0).min().over("group", "seq")
    frame = frame.with_columns(
        exit_ns=pl.when(pl.col("stop") > 0).then(pl.col("stop")).otherwise(anchor),
        verbose=pl.col("stop") > 0,
    ).with_columns(enter_ns=pl.col("exit_ns") - pl.col("exec_ns"))
    return frame.with_columns(
        call_ns=pl.when(pl.col("call") > 0).then(pl.col("call")).otherwise(pl.col("enter_ns")),
        timing=pl.concat_str(pl.lit("inspector_"), pl.col("source")),
        group_size=pl.col("group").replace_strict(logs.comm_size, return_dtype=pl.Int32),
    )


def _rank_frames(frame: pl.DataFrame, logs: _Logs, rank_of: dict[_Proc, int]) -> list[RankFrame]:
    members: dict[str, dict[int, int]] = defaultdict(dict)
    for (proc, comm), r in logs.comm_rank.items():
        members[comm][r] = rank_of[proc]
    out = []
    for proc, r in sorted(rank_of.items(), key=lambda kv: kv[1]):
        events = frame.filter(pl.col("rank") == r).select(
            "group",
            "group_size",
            "seq",
            "op",
            "bytes",
            dtype=pl.lit(""),
            peer=pl.lit(-1, pl.Int32),
            enter_ns="enter_ns",
            exit_ns="exit_ns",
            timing="timing",
            status=pl.lit("completed"),
            error=pl.lit(None, pl.String),
            wait_ns=pl.lit(-1, pl.Int64),
            call_ns="call_ns",
        )
        groups = {
            comm: {"ranks": [m[i] for i in sorted(m)], "backend": "nccl"}
            for comm, m in members.items()
            if (proc, comm) in logs.comm_rank
        }
        out.append(
            RankFrame(
                rank=r,
                events=events.cast(INPUT_COLUMNS),
                step_rule="windows",
                host=proc[0],
                pid=proc[1],
                device="cuda",
                backend="nccl",
                groups=groups,
                files=sorted(logs.files[proc]),
            )
        )
    return out


def _missing(window_ms: float, verbose: bool) -> list[str]:
    missing = [
        f"iterations (steps are windows of {window_ms:g} ms)",
        "dtypes",
        "point-to-point peers",
    ]
    if not verbose:
        missing.append(
            "when collectives started: enters are each instance's end minus the rank's "
            "own execution time"
        )
    return missing


def _sampling(frame: pl.DataFrame) -> str | None:
    """A warning when the logs hold only part of the collectives (the dump interval was
    longer than the gap between them)."""
    spans = frame.group_by("rank", "group").agg(
        n=pl.len(), span=pl.col("seq").max() - pl.col("seq").min() + 1
    )
    held, expected = int(spans["n"].sum()), int(spans["span"].sum())
    if expected == 0 or held >= 0.95 * expected:
        return None
    return (
        f"the logs hold {held:,} of the {expected:,} collectives between each communicator's "
        "first and last sequence number: the Inspector writes only the latest completed "
        "collective per dump interval (lower NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS "
        "to record more)"
    )
