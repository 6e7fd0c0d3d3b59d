"""PyTorch profiler (Kineto) traces: Chrome-trace JSON, one or more files per rank.

What a trace holds about collectives depends on the backend:

* **NCCL** (and any backend that records them): a ``record_param_comms`` CPU op per
  call with the collective's name, element counts, dtype, process group (name, ranks,
  size) and sequence number; with CUDA activities on, the NCCL kernel
  (``ncclDevKernel_*``, or ``ncclKernel_*`` before NCCL 2.19) on the GPU timeline.
* **gloo** (torch 2.13 records no ``record_param_comms`` for it): the dispatcher op on
  the calling thread (``c10d::allreduce_``: when the call was issued, and with
  ``record_shapes`` the tensor sizes) and gloo's work span on one of the process group's
  worker threads (``gloo:all_reduce``: the work running, until it completed). Nothing
  names the group, so it is told from the worker threads: each gloo backend starts
  ``gloo_threads`` of them when the group is created, consecutively, so their thread ids
  are consecutive; which block belongs to which group is decided by which assignment
  makes the members' collectives agree across ranks.

Host and device timestamps are kept apart: a row's enter and exit come from one source,
named in its ``timing`` (``profiler_host``, ``profiler_call``, ``profiler_device``).
Iterations come from ``ProfilerStep#N`` spans (a scheduled profiler) or else from the
ends of ``Optimizer.step#…`` spans.

The files are scanned by :mod:`~syncpace.importers.kineto_scan`, gloo's groups and calls
told by :mod:`~syncpace.importers.kineto_gloo`; here the rest of the rows and each rank's
frame.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from syncpace.errors import TraceError
from syncpace.importers import dtypes, sources, tracebuild
from syncpace.importers.config import ImportConfig
from syncpace.importers.contract import INPUT_COLUMNS, UNKNOWN, Conversion, RankFrame, Request
from syncpace.importers.kineto_gloo import gloo_rows, map_gloo_groups
from syncpace.importers.kineto_scan import Kernel, RankScan, Rpc, as_int, scan_all

FORMAT = "kineto"
SUFFIXES = (".json", ".json.gz")

#: record_param_comms "Collective name" -> (op, which count is the nccl-tests size)
#: "in": In msg nelems; "out": Out msg nelems; "in*n"/"out*n": times the group size.
_RPC_OPS = {
    "allreduce": ("all_reduce", "in"),
    "allreduce_coalesced": ("all_reduce", "in"),
    "allgather": ("all_gather", "out"),
    "_allgather_base": ("all_gather", "out"),
    "allgather_coalesced": ("all_gather", "out"),
    "allgather_into_tensor_coalesced": ("all_gather", "out"),
    "all_gather_into_tensor": ("all_gather", "out"),
    "reduce_scatter": ("reduce_scatter", "in"),
    "_reduce_scatter_base": ("reduce_scatter", "in"),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", "in"),
    "reduce_scatter_tensor": ("reduce_scatter", "in"),
    "broadcast": ("broadcast", "in"),
    "_broadcast_oop": ("broadcast", "in"),
    "reduce": ("reduce", "in"),
    "_reduce_oop": ("reduce", "in"),
    "gather": ("gather", "in*n"),
    "scatter": ("scatter", "out*n"),
    "all_to_all": ("all_to_all", "in"),
    "alltoall": ("all_to_all", "in"),
    "alltoall_base": ("all_to_all", "in"),
    "barrier": ("barrier", "zero"),
    "send": ("send", "in"),
    "recv": ("recv", "out"),
    "recvAnySource": ("recv", "out"),
}


# Rows ----------------------------------------------------------------------------------


def _outermost(rpcs: list[Rpc]) -> list[Rpc]:
    """record_param_comms ops not nested in another on the same thread (a barrier that
    issues an all-reduce records both)."""
    out: list[Rpc] = []
    last_end: dict[int, int] = {}
    for r in sorted(rpcs, key=lambda r: (r.tid, r.ts, -r.end)):
        if r.ts < last_end.get(r.tid, -1) and r.end <= last_end[r.tid]:
            continue
        out.append(r)
        last_end[r.tid] = r.end
    return out


def _rpc_rows(scan: RankScan, use_device: bool, stats: Counter) -> tuple[list[dict[str, Any]], int]:
    """One row per record_param_comms call; with ``use_device`` timed by its kernel(s)."""
    kernels = _Kernels(scan.kernels)
    rows: list[dict[str, Any]] = []
    for r in _outermost(scan.rpc):
        if r.name not in _RPC_OPS:
            stats[f"record_param_comms '{r.name}' not understood"] += 1
            continue
        row = _rpc_row(r, scan.world_size)
        if use_device:
            found = kernels.of(r, p2p=row["op"] in ("send", "recv"))
            if not found:  # no device time: a host time beside the others' kernels would mislead
                stats["calls without their NCCL kernel (left out)"] += 1
                continue
            row["enter_ns"] = min(k.ts for k in found)
            row["exit_ns"] = max(k.end for k in found)
            row["timing"] = "profiler_device"
            kernels.used.update(id(k) for k in found)
        rows.append(row)
    if use_device:
        stats["NCCL kernels without their call"] += sum(
            1 for k in scan.kernels if id(k) not in kernels.used
        )
    device = next((k.device for k in scan.kernels if k.device >= 0), UNKNOWN)
    return rows, device


class _Kernels:
    """A rank's NCCL kernels by the call they ran for: (group, seq) where torch copies
    them onto the kernel, else the External id (older traces)."""

    def __init__(self, kernels: list[Kernel]) -> None:
        self.by_key: dict[tuple[str, int], list[Kernel]] = defaultdict(list)
        self.by_ext: dict[int, list[Kernel]] = defaultdict(list)
        self.used: set[int] = set()
        for k in kernels:
            if k.group and k.seq >= 0:
                self.by_key[(k.group, k.seq)].append(k)
            if k.ext >= 0:
                self.by_ext[k.ext].append(k)

    def of(self, r: Rpc, p2p: bool) -> list[Kernel]:
        # point-to-point seq counts per peer pair in the trace, per group in the kernel's
        found = [] if p2p else self.by_key.get((r.group, r.seq), [])
        if not found and r.ext >= 0:
            found = self.by_ext.get(r.ext, [])
        return found


def _rpc_row(r: Rpc, world_size: int | None) -> dict[str, Any]:
    """A record_param_comms call as a row, timed by the call (``profiler_call``)."""
    op, rule = _RPC_OPS[r.name]
    size = r.size if r.size > 0 else len(r.ranks or []) or (world_size or 1)
    count = {"in": r.in_n, "out": r.out_n, "in*n": r.in_n * size, "out*n": r.out_n * size}
    numel = 0 if rule == "zero" else max(count[rule], 0)
    if op == "recv" and numel == 0:
        numel = max(r.in_n, 0)
    p2p = op in ("send", "recv")
    peer = r.peer
    if p2p and peer >= 0 and r.ranks and peer < len(r.ranks):
        peer = r.ranks[peer]
    return {
        "group": r.group or "0",
        "group_size": size,
        "seq": -1 if p2p else r.seq,  # p2p seq counts per peer pair in the trace
        "op": op,
        "bytes": numel * dtypes.item_size(r.dtype),
        "dtype": "" if op == "barrier" else r.dtype,
        "peer": peer if p2p else -1,
        "enter_ns": r.ts,
        "exit_ns": r.end,
        "timing": "profiler_call",
        "status": "completed",
        "error": None,
        "wait_ns": -1,
        "call_ns": r.ts,
        "_sized": True,
    }


def _steps(scan: RankScan) -> tuple[pl.DataFrame | None, str]:
    if scan.profiler_steps:
        rows = sorted(set(scan.profiler_steps))
        return pl.DataFrame(rows, schema=["step", "start_ns", "end_ns"], orient="row"), "spans"
    if scan.optimizer_steps:
        ends = sorted(set(scan.optimizer_steps), key=lambda s: s[1])
        first_call = min(
            [c.ts for c in scan.calls] + [r.ts for r in scan.rpc] + [ends[0][0]], default=0
        )
        starts = [first_call] + [e for _, e in ends[:-1]]
        rows = [(i, s, e) for i, (s, (_, e)) in enumerate(zip(starts, ends, strict=True))]
        return pl.DataFrame(rows, schema=["step", "start_ns", "end_ns"], orient="row"), "ends"
    return None, "none"


# The conversion ------------------------------------------------------------------------


class KinetoConverter:
    """The profiler traces among the sources (files or directories, plain or gzip'd JSON,
    one or more per rank)."""

    options: tuple[str, ...] = ()

    def find(self, srcs: Sequence[Path]) -> list[Path]:
        return sources.find_files(srcs, SUFFIXES, "PyTorch profiler traces")

    def read(self, request: Request) -> Conversion:
        warnings: list[str] = []
        files = list(request.files)
        scans = scan_all(files, request.on_bytes, warnings)
        plan = _Plan.of(scans, request.config, files[0])
        stats: Counter[str] = Counter()
        ranks = [plan.rank_frame(scan, stats) for _, scan in sorted(scans.items())]
        for what, n in sorted(stats.items()):
            if n:
                warnings.append(f"{n} {what}")
        absent = sorted(set(range(plan.world)) - set(scans))
        if absent:
            warnings.append(f"{len(absent)} of {plan.world} ranks have no profiler trace: {absent}")
        return Conversion(
            ranks=[frame for frame, _ in ranks],
            world_size=plan.world,
            resolution_ns=1_000,
            missing=plan.missing(scans, ranks),
            warnings=warnings,
            notes={
                "collectives_from": (
                    "record_param_comms" if plan.has_rpc else "c10d ops and gloo work spans"
                ),
                "timing_source": "device" if plan.use_device else "host",
            },
        )


CONVERTER = KinetoConverter()


@dataclass(frozen=True)
class _Plan:
    """What holds for every rank of a conversion: the world, which timing, gloo's groups."""

    world: int
    has_kernels: bool
    has_rpc: bool
    use_device: bool
    tid_groups: dict[int, dict[int, str]]

    @classmethod
    def of(cls, scans: dict[int, RankScan], config: ImportConfig, where: Path) -> _Plan:
        sizes = {s.world_size for s in scans.values() if s.world_size}
        if len(sizes) > 1:
            raise TraceError(
                where.parent, f"the traces disagree on the world size: {sorted(sizes)}"
            )
        has_kernels = any(s.kernels for s in scans.values())
        if config.timing == "device" and not has_kernels:
            raise TraceError(
                where, "--timing device: the traces hold no NCCL kernels (no CUDA activity)"
            )
        return cls(
            world=sizes.pop() if sizes else max(scans) + 1,
            has_kernels=has_kernels,
            has_rpc=any(s.rpc for s in scans.values()),
            use_device=has_kernels and config.timing != "host",
            tid_groups=map_gloo_groups(scans, config.gloo_threads),
        )

    def rank_frame(self, scan: RankScan, stats: Counter) -> tuple[RankFrame, int]:
        """One rank's frame, and how many of its calls have no size."""
        group_info = {
            str(p.get("pg_name")): (
                as_int(p.get("pg_size"), 1),
                [int(x) for x in p.get("ranks") or []],
            )
            for p in scan.pg_config
        } or {"0": (self.world, list(range(self.world)))}
        rows, device = _rpc_rows(scan, self.use_device, stats)
        rows += gloo_rows(scan, self.tid_groups.get(scan.rank, {}), group_info, stats)
        unsized = sum(1 for row in rows if not row.pop("_sized"))
        steps, rule = _steps(scan)
        frame = RankFrame(
            rank=scan.rank,
            events=(
                pl.DataFrame(rows, schema=INPUT_COLUMNS) if rows else tracebuild.empty_events()
            ),
            steps=steps,
            step_rule=rule,
            host=scan.host,
            pid=scan.pid,
            device=f"cuda:{device}" if device >= 0 else ("cuda" if self.has_kernels else "cpu"),
            backend=scan.backend,
            groups={
                name: {"ranks": ranks, "backend": _backend_of(scan, name)}
                for name, (_, ranks) in group_info.items()
            },
            files=scan.files,
            notes=(
                {"profiler_events_skipped": scan.other_events} if scan.other_events >= 0 else {}
            ),
        )
        return frame, unsized

    def missing(self, scans: dict[int, RankScan], ranks: list[tuple[RankFrame, int]]) -> list[str]:
        """What the traces could not tell."""
        missing = set()
        if any(frame.step_rule == "none" for frame, _ in ranks):
            missing.add("iterations (no ProfilerStep# or Optimizer.step# spans)")
        if any(s.host is None for s in scans.values()):
            missing.add("host names (the traces name no host): every rank counts as one node")
        if any(unsized for _, unsized in ranks):
            missing.add(
                "message sizes of some calls (the profiler ran without record_shapes): their "
                "bytes are 0"
            )
        if not self.has_rpc and any(s.spans for s in scans.values()):
            missing.add(
                "process group names (gloo records none): groups are told from gloo's worker "
                "threads"
            )
        if not self.has_kernels:
            missing.add("device timing (no NCCL kernels in the traces)")
        return sorted(missing)


def _backend_of(scan: RankScan, group: str) -> str:
    for p in scan.pg_config:
        if str(p.get("pg_name")) == group:
            return str(p.get("backend_config") or scan.backend)
    return scan.backend
