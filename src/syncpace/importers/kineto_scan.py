"""What a rank's profiler traces hold that matters for collectives, in one pass per file.

Kept: ``record_param_comms`` ops, c10d dispatcher ops, gloo work spans, NCCL kernels and
the spans that mark iterations (``ProfilerStep#N``, ``Optimizer.step#…``), with the
header's rank, world, host, backend and groups; every other event is counted and
dropped. Several files of one rank (several profiling cycles) are merged.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any, NamedTuple

from syncpace.errors import TraceError
from syncpace.importers import dtypes, jsonstream
from syncpace.importers.contract import UNKNOWN

#: Names worth a second look (anything else is skipped after one startswith).
PREFIXES = ("c10d::", "gloo:", "record_param_comms", "ProfilerStep#", "Optimizer.step#", "nccl")
_KERNEL_PREFIXES = ("ncclDevKernel", "ncclKernel")

#: gloo reduces-and-scatters with all-reduces (one per rank for the list API).
_RS_SPANS = ("gloo:all_reduce", "gloo:reduce_scatter")

#: c10d dispatcher op -> (op, size rule over its record_shapes inputs, gloo span names)
#: Size rules: "a0" sum of argument 0's elements, "a1" argument 1's; "*n" times the
#: group size; "zero" for a barrier.
C10D_OPS = {
    "c10d::allreduce_": ("all_reduce", "a0", ("gloo:all_reduce",)),
    "c10d::allreduce_coalesced_": ("all_reduce", "a0", ("gloo:all_reduce",)),
    "c10d::allgather_": ("all_gather", "a1*n", ("gloo:all_gather",)),
    "c10d::_allgather_base_": ("all_gather", "a0", ("gloo:all_gather",)),
    "c10d::allgather_coalesced_": ("all_gather", "a1*n", ("gloo:all_gather",)),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather", "a0", ("gloo:all_gather",)),
    "c10d::reduce_scatter_": ("reduce_scatter", "a0*n", _RS_SPANS),
    "c10d::_reduce_scatter_base_": ("reduce_scatter", "a1", _RS_SPANS),
    "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter", "a1", _RS_SPANS),
    "c10d::broadcast_": ("broadcast", "a0", ("gloo:broadcast",)),
    "c10d::reduce_": ("reduce", "a0", ("gloo:reduce",)),
    "c10d::gather_": ("gather", "a1*n", ("gloo:gather",)),
    "c10d::scatter_": ("scatter", "a0*n", ("gloo:scatter",)),
    "c10d::alltoall_base_": ("all_to_all", "a1", ("gloo:all_to_all",)),
    "c10d::alltoall_": ("all_to_all", "a1", ("gloo:all_to_all",)),
    "c10d::barrier": ("barrier", "zero", ("gloo:barrier",)),
    "c10d::monitored_barrier_": ("barrier", "zero", ("gloo:barrier",)),
    "c10d::send": ("send", "a0", ("gloo:send",)),
    "c10d::recv_": ("recv", "a0", ("gloo:recv",)),
    "c10d::recv_any_source_": ("recv", "a0", ("gloo:recvAnySource", "gloo:recv")),
}

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


# Scanning ------------------------------------------------------------------------------


@dataclass
class Rpc:  # a record_param_comms op
    tid: int
    ts: int
    end: int
    ext: int
    name: str
    in_n: int
    out_n: int
    dtype: str
    group: str
    ranks: list[int] | None
    size: int
    seq: int
    peer: int


@dataclass
class Call:  # a c10d dispatcher op
    tid: int
    ts: int
    end: int
    name: str
    dims: list[Any] | None
    types: list[Any] | None
    peer: int


@dataclass
class Span:  # a gloo work span
    tid: int
    ts: int
    end: int
    name: str
    numel: int
    dtype: str


@dataclass
class Kernel:
    ts: int
    end: int
    ext: int
    device: int
    group: str
    seq: int
    name: str


@dataclass
class RankScan:
    """What one rank's profiler files hold that matters for collectives."""

    rank: int
    world_size: int | None = None
    host: str | None = None
    pid: int | None = None
    backend: str = "unknown"
    pg_config: list[dict[str, Any]] = field(default_factory=list)
    record_shapes: bool | None = None
    files: list[str] = field(default_factory=list)
    rpc: list[Rpc] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    profiler_steps: list[tuple[int, int, int]] = field(default_factory=list)
    optimizer_steps: list[tuple[int, int]] = field(default_factory=list)
    other_events: int = 0

    def merge(self, other: RankScan) -> None:
        for name in ("rpc", "calls", "spans", "kernels", "profiler_steps", "optimizer_steps"):
            getattr(self, name).extend(getattr(other, name))
        self.files.extend(other.files)
        if min(self.other_events, other.other_events) < 0:
            self.other_events = -1
        else:
            self.other_events += other.other_events
        self.world_size = self.world_size or other.world_size
        self.host = self.host or other.host
        self.pid = self.pid or other.pid
        if self.backend == "unknown":
            self.backend = other.backend
        if len(other.pg_config) > len(self.pg_config):
            self.pg_config = other.pg_config
        if self.record_shapes is None:
            self.record_shapes = other.record_shapes


def as_int(value: Any, default: int = UNKNOWN) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _ranks(value: Any) -> list[int] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return [int(v) for v in value]
    return None


def elements(dims: Any) -> int:
    """Elements of a record_shapes entry: a tensor ``[d0, d1]``, a list of tensors
    ``[[d0], [d0, d1]]``; -1 when not a tensor."""
    if not isinstance(dims, list):
        return UNKNOWN
    if all(isinstance(d, int) for d in dims):
        return prod(dims) if dims else UNKNOWN
    if all(isinstance(d, list) for d in dims) and dims:
        parts = [prod(d) for d in dims if all(isinstance(x, int) for x in d)]
        return sum(parts) if len(parts) == len(dims) else UNKNOWN
    return UNKNOWN


def scan_file(
    path: Path,
    on_bytes: jsonstream.Progress | None,
    warnings: list[str],
    header: dict[str, Any] | None = None,
) -> RankScan:
    """One pass over ``path``: the collectives, gloo work, NCCL kernels and iterations.

    Files in the layout Kineto writes take the fast path (only the events that matter
    are parsed, see :func:`~syncpace.importers.jsonstream.iter_named_events`); any other
    valid JSON is parsed in full, as a stream.
    """
    header = jsonstream.read_header(path) if header is None else header
    found: list[str] = []
    try:
        wanted = _wanted_names(header)
        scan = _scan(path, header, jsonstream.iter_named_events(path, wanted, on_bytes, found))
        scan.other_events = -1  # not counted: the other events were never parsed
    except jsonstream.NotThisLayout:
        found.clear()
        scan = _scan(path, header, jsonstream.iter_items(path, None, on_bytes, found))
    warnings.extend(found)
    if scan.rank < 0:
        raise TraceError(
            path,
            "cannot tell which rank wrote this trace (no distributedInfo in its header, no "
            "rank in its name, no collectives naming it): pass one directory or file per "
            "rank named rank<N>…",
        )
    return scan


#: Event names an NCCL job's collectives and iterations show as (long, so the byte
#: search for them runs fast; gloo's short ``c10d::``/``gloo:`` are searched only when
#: some group may run gloo).
_NCCL_NAMES = (
    "record_param_comms",
    "ProfilerStep#",
    "Optimizer.step#",
    "ncclDevKernel",
    "ncclKernel",
)


def _wanted_names(header: dict[str, Any]) -> tuple[str, ...]:
    """The name prefixes worth parsing in a trace with this header."""
    info = header.get("distributedInfo")
    if not isinstance(info, dict) or str(info.get("backend", "")).lower() != "nccl":
        return PREFIXES
    configs = [str(p.get("backend_config", "")) for p in info.get("pg_config") or []]
    if any("gloo" in c for c in configs):
        return PREFIXES
    return _NCCL_NAMES


def _scan(path: Path, header: dict[str, Any], events: Iterable[Any]) -> RankScan:
    scan = _empty_scan(path, header)
    base_ns = as_int(header.get("baseTimeNanoseconds"), 0)
    pids: Counter[int] = Counter()
    other = 0
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            other += 1
            continue
        name = e.get("name")
        if not isinstance(name, str) or not name.startswith(PREFIXES):
            other += 1
            continue
        event = _event(e, name, base_ns)
        if event is not None and not _add(scan, event, pids):
            other += 1
    scan.other_events = other
    if pids:
        scan.pid = pids.most_common(1)[0][0]
    return scan


def _empty_scan(path: Path, header: dict[str, Any]) -> RankScan:
    """A rank's scan with what the header says: rank (else from the file name), world,
    host, backend, groups, whether shapes were recorded."""
    info = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    rank = as_int(info.get("rank"))
    if rank < 0:
        match = _RANK_IN_NAME.search(path.name)
        rank = int(match.group(1)) if match else UNKNOWN
    return RankScan(
        rank=rank,
        world_size=as_int(info.get("world_size"), 0) or None,
        host=header.get("host_name") if isinstance(header.get("host_name"), str) else None,
        backend=str(info.get("backend") or "unknown"),
        pg_config=[p for p in info.get("pg_config") or [] if isinstance(p, dict)],
        record_shapes=bool(header["record_shapes"]) if "record_shapes" in header else None,
        files=[str(path)],
    )


class _Event(NamedTuple):
    """A complete event ("X") of a wanted name, its times in ns on the rank's clock."""

    name: str
    ts: int
    end: int
    tid: int
    cat: Any
    args: dict[str, Any]
    raw: dict[str, Any]


def _event(e: dict[str, Any], name: str, base_ns: int) -> _Event | None:
    """``e`` with its times; None when they are not numbers (the event is left out)."""
    try:
        ts = base_ns + int(round(float(e["ts"]) * 1000.0))
        end = ts + int(round(float(e.get("dur", 0)) * 1000.0))
    except (KeyError, TypeError, ValueError):
        return None
    args = e.get("args") if isinstance(e.get("args"), dict) else {}
    return _Event(name, ts, end, as_int(e.get("tid"), 0), e.get("cat"), args, e)


def _add(scan: RankScan, e: _Event, pids: Counter[int]) -> bool:
    """``e`` added to what ``scan`` keeps; False when it is none of the kinds kept."""
    name, args = e.name, e.args
    if name == "record_param_comms":
        pids[as_int(e.raw.get("pid"), 0)] += 1
        if scan.rank < 0:
            scan.rank = as_int(args.get("Rank"))
        scan.rpc.append(_rpc(e))
    elif name.startswith("c10d::"):
        if name in C10D_OPS:
            pids[as_int(e.raw.get("pid"), 0)] += 1
            scan.calls.append(_call(e))
    elif name.startswith("gloo:"):
        types = args.get("Input type")
        first = types[0] if isinstance(types, list) and types else None
        numel = elements(args.get("Input Dims"))
        scan.spans.append(Span(e.tid, e.ts, e.end, name, numel, dtypes.canonical(first)))
    elif e.cat == "kernel" and name.startswith(_KERNEL_PREFIXES):
        scan.kernels.append(_kernel(e))
    elif e.cat == "user_annotation" and name.startswith("ProfilerStep#"):
        match = _STEP_RE.match(name)
        if match:
            scan.profiler_steps.append((int(match.group(1)), e.ts, e.end))
    elif e.cat == "user_annotation" and name.startswith("Optimizer.step#"):
        scan.optimizer_steps.append((e.ts, e.end))
    else:
        return False
    return True


def _rpc(e: _Event) -> Rpc:
    args = e.args
    return Rpc(
        tid=e.tid,
        ts=e.ts,
        end=e.end,
        ext=as_int(args.get("External id")),
        name=str(args.get("Collective name", "")),
        in_n=as_int(args.get("In msg nelems")),
        out_n=as_int(args.get("Out msg nelems")),
        dtype=dtypes.canonical(args.get("dtype")),
        group=str(args.get("Process Group Name", "")),
        ranks=_ranks(args.get("Process Group Ranks")),
        size=as_int(args.get("Group size")),
        seq=as_int(args.get("Seq")),
        peer=as_int(args.get("Dst Rank", args.get("Src Rank"))),
    )


def _call(e: _Event) -> Call:
    concrete = e.args.get("Concrete Inputs")
    peer = UNKNOWN
    if C10D_OPS[e.name][0] in ("send", "recv") and isinstance(concrete, list):
        peer = as_int(concrete[2] if len(concrete) > 2 else None)
    dims, types = e.args.get("Input Dims"), e.args.get("Input type")
    return Call(e.tid, e.ts, e.end, e.name, dims, types, peer)


def _kernel(e: _Event) -> Kernel:
    args = e.args
    return Kernel(
        ts=e.ts,
        end=e.end,
        ext=as_int(args.get("External id")),
        device=as_int(args.get("device")),
        group=str(args.get("Process Group Name", "")),
        seq=as_int(args.get("Seq")),
        name=e.name,
    )


def scan_all(
    files: list[Path], on_bytes: jsonstream.Progress | None, warnings: list[str]
) -> dict[int, RankScan]:
    """Every profiler trace in ``files`` scanned, merged per rank (several profiling
    cycles of a rank are one rank). Files that are not Chrome traces are skipped, and a
    trace present twice (``trace_id``; e.g. as ``.json`` and ``.json.gz``) is read once."""
    scans: dict[int, RankScan] = {}
    skipped, twice = [], []
    seen: set[tuple[str, str]] = set()
    for path in files:
        if not jsonstream.is_chrome_trace(path):
            skipped.append(path.name)
            continue
        header = jsonstream.read_header(path)
        if header.get("trace_id"):
            info = header.get("distributedInfo")
            key = (str(header["trace_id"]), str(info.get("rank") if isinstance(info, dict) else ""))
            if key in seen:
                twice.append(path.name)
                continue
            seen.add(key)
        scan = scan_file(path, on_bytes, warnings, header)
        if scan.rank in scans:
            scans[scan.rank].merge(scan)
        else:
            scans[scan.rank] = scan
    if skipped:
        names = ", ".join(skipped[:5])
        warnings.append(f"{len(skipped)} JSON file(s) are not profiler traces: {names}")
    if twice:
        names = ", ".join(twice[:5])
        warnings.append(f"{len(twice)} trace(s) are here twice, read once: {names}")
    if not scans:
        raise TraceError(files[0].parent, "no PyTorch profiler traces among the given files")
    return scans
