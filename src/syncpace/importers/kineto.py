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
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations_with_replacement
from math import prod
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from syncpace.errors import TraceError
from syncpace.importers import dtypes, jsonstream, sources, tracebuild
from syncpace.importers.config import ImportConfig
from syncpace.importers.contract import Conversion, RankFrame, Request
from syncpace.importers.tracebuild import UNKNOWN

FORMAT = "kineto"
SUFFIXES = (".json", ".json.gz")

#: Names worth a second look (anything else is skipped after one startswith).
_PREFIXES = ("c10d::", "gloo:", "record_param_comms", "ProfilerStep#", "Optimizer.step#", "nccl")
_KERNEL_PREFIXES = ("ncclDevKernel", "ncclKernel")

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

#: gloo reduces-and-scatters with all-reduces (one per rank for the list API).
_RS_SPANS = ("gloo:all_reduce", "gloo:reduce_scatter")

#: c10d dispatcher op -> (op, size rule over its record_shapes inputs, gloo span names)
#: Size rules: "a0" sum of argument 0's elements, "a1" argument 1's; "*n" times the
#: group size; "zero" for a barrier.
_C10D_OPS = {
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
_P2P_SPANS = ("gloo:send", "gloo:recv", "gloo:recvAnySource")

#: How many queued gloo spans a call looks past (spans of earlier calls not in the trace).
_LOOKAHEAD = 8

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


# Scanning ------------------------------------------------------------------------------


@dataclass
class _Rpc:  # a record_param_comms op
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
class _Call:  # a c10d dispatcher op
    tid: int
    ts: int
    end: int
    name: str
    dims: list[Any] | None
    types: list[Any] | None
    peer: int


@dataclass
class _Span:  # a gloo work span
    tid: int
    ts: int
    end: int
    name: str
    numel: int
    dtype: str


@dataclass
class _Kernel:
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
    rpc: list[_Rpc] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    spans: list[_Span] = field(default_factory=list)
    kernels: list[_Kernel] = field(default_factory=list)
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


def _int(value: Any, default: int = UNKNOWN) -> int:
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


def _numel(dims: Any) -> int:
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
        return _PREFIXES
    configs = [str(p.get("backend_config", "")) for p in info.get("pg_config") or []]
    if any("gloo" in c for c in configs):
        return _PREFIXES
    return _NCCL_NAMES


def _scan(path: Path, header: dict[str, Any], events: Iterable[Any]) -> RankScan:
    scan = _empty_scan(path, header)
    base_ns = _int(header.get("baseTimeNanoseconds"), 0)
    pids: Counter[int] = Counter()
    other = 0
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            other += 1
            continue
        name = e.get("name")
        if not isinstance(name, str) or not name.startswith(_PREFIXES):
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
    rank = _int(info.get("rank"))
    if rank < 0:
        match = _RANK_IN_NAME.search(path.name)
        rank = int(match.group(1)) if match else UNKNOWN
    return RankScan(
        rank=rank,
        world_size=_int(info.get("world_size"), 0) or None,
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
    return _Event(name, ts, end, _int(e.get("tid"), 0), e.get("cat"), args, e)


def _add(scan: RankScan, e: _Event, pids: Counter[int]) -> bool:
    """``e`` added to what ``scan`` keeps; False when it is none of the kinds kept."""
    name, args = e.name, e.args
    if name == "record_param_comms":
        pids[_int(e.raw.get("pid"), 0)] += 1
        if scan.rank < 0:
            scan.rank = _int(args.get("Rank"))
        scan.rpc.append(_rpc(e))
    elif name.startswith("c10d::"):
        if name in _C10D_OPS:
            pids[_int(e.raw.get("pid"), 0)] += 1
            scan.calls.append(_call(e))
    elif name.startswith("gloo:"):
        types = args.get("Input type")
        first = types[0] if isinstance(types, list) and types else None
        numel = _numel(args.get("Input Dims"))
        scan.spans.append(_Span(e.tid, e.ts, e.end, name, numel, dtypes.canonical(first)))
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


def _rpc(e: _Event) -> _Rpc:
    args = e.args
    return _Rpc(
        tid=e.tid,
        ts=e.ts,
        end=e.end,
        ext=_int(args.get("External id")),
        name=str(args.get("Collective name", "")),
        in_n=_int(args.get("In msg nelems")),
        out_n=_int(args.get("Out msg nelems")),
        dtype=dtypes.canonical(args.get("dtype")),
        group=str(args.get("Process Group Name", "")),
        ranks=_ranks(args.get("Process Group Ranks")),
        size=_int(args.get("Group size")),
        seq=_int(args.get("Seq")),
        peer=_int(args.get("Dst Rank", args.get("Src Rank"))),
    )


def _call(e: _Event) -> _Call:
    concrete = e.args.get("Concrete Inputs")
    peer = UNKNOWN
    if _C10D_OPS[e.name][0] in ("send", "recv") and isinstance(concrete, list):
        peer = _int(concrete[2] if len(concrete) > 2 else None)
    dims, types = e.args.get("Input Dims"), e.args.get("Input type")
    return _Call(e.tid, e.ts, e.end, e.name, dims, types, peer)


def _kernel(e: _Event) -> _Kernel:
    args = e.args
    return _Kernel(
        ts=e.ts,
        end=e.end,
        ext=_int(args.get("External id")),
        device=_int(args.get("device")),
        group=str(args.get("Process Group Name", "")),
        seq=_int(args.get("Seq")),
        name=e.name,
    )


# gloo: worker threads -> process groups -------------------------------------------------


def _clusters(spans: Sequence[_Span], threads: int) -> dict[int, int]:
    """Worker thread id -> block index: consecutive ids, ``threads`` per gloo backend."""
    tids = sorted({s.tid for s in spans if s.name not in _P2P_SPANS})
    blocks: dict[int, int] = {}
    start, index = None, -1
    for tid in tids:
        if start is None or tid - start >= threads:
            start, index = tid, index + 1
        blocks[tid] = index
    return blocks


def _labels(spans: Sequence[_Span], blocks: dict[int, int]) -> list[Counter[tuple[str, int]]]:
    count = max(blocks.values(), default=-1) + 1
    out: list[Counter[tuple[str, int]]] = [Counter() for _ in range(count)]
    for s in spans:
        if s.tid in blocks:
            out[blocks[s.tid]][(s.name, s.numel)] += 1
    return out


def _monotone_maps(blocks: int, groups: int, cap: int = 4096) -> list[tuple[int, ...]]:
    """Every non-decreasing map of ``blocks`` blocks onto ``groups`` groups (creation
    order is kept: a later block never belongs to an earlier group)."""
    if blocks == 0:
        return [()]
    maps = []
    for combo in combinations_with_replacement(range(groups), blocks):
        maps.append(combo)
        if len(maps) >= cap:
            break
    return maps


def map_gloo_groups(scans: dict[int, RankScan], threads: int) -> dict[int, dict[int, str]]:
    """Per rank: gloo worker thread id -> process group name.

    Each rank's blocks of worker threads keep the order their groups were created in
    (``pg_config`` lists the groups in that order). When a rank has as many blocks as
    gloo groups the map is that order; otherwise every order-keeping map is scored by how
    many collectives it makes agree with the other members of each group (same gloo op,
    same size), and the best is kept, a few rounds over all ranks.
    """
    groups = _GlooGroups(scans, threads)
    for _ in range(3):
        if not any([groups.improve(r) for r in scans]):
            break
    return groups.threads()


#: A map of a rank's blocks of worker threads onto its groups (block -> group index).
_Mapping = tuple[int, ...]


class _GlooGroups:
    """The gloo worker threads of every rank, and the current map of each onto groups."""

    def __init__(self, scans: dict[int, RankScan], threads: int) -> None:
        self.blocks = {r: _clusters(s.spans, threads) for r, s in scans.items()}
        self.labels = {r: _labels(scans[r].spans, self.blocks[r]) for r in scans}
        self.names = {
            r: [str(p.get("pg_name")) for p in s.pg_config] or ["0"] for r, s in scans.items()
        }
        self.members = {
            str(p.get("pg_name")): [int(x) for x in p["ranks"]]
            for s in scans.values()
            for p in s.pg_config
            if isinstance(p.get("ranks"), list)
        }
        self.choice: dict[int, _Mapping] = {}
        for r in scans:
            n_blocks, n_groups = len(self.labels[r]), len(self.names[r])
            # more blocks than groups: the extra ones join the last group
            self.choice[r] = tuple(min(i, n_groups - 1) for i in range(n_blocks))

    def per_group(self, r: int, mapping: _Mapping) -> dict[str, Counter]:
        out: dict[str, Counter] = defaultdict(Counter)
        for block, g in enumerate(mapping):
            out[self.names[r][g]] += self.labels[r][block]
        return out

    def score(self, r: int, mapping: _Mapping, current: dict[int, dict[str, Counter]]) -> int:
        """How many of rank ``r``'s collectives agree with the other members' under
        ``mapping`` (the others' maps as they are)."""
        total = 0
        for g, counter in self.per_group(r, mapping).items():
            for other in self.members.get(g, list(current)):
                if other in current:
                    total += sum((counter & current[other].get(g, Counter())).values())
        return total

    def improve(self, r: int) -> bool:
        """Rank ``r``'s map replaced by the best scoring one; whether it changed."""
        if len(self.choice) < 2 or not self.labels[r]:
            return False
        current = {o: self.per_group(o, self.choice[o]) for o in self.choice if o != r}

        def score(m: _Mapping) -> int:
            return self.score(r, m, current)

        candidates = _monotone_maps(len(self.labels[r]), len(self.names[r]))
        best = max(candidates, key=lambda m: (score(m), m == self.choice[r]))
        if best != self.choice[r] and score(best) > score(self.choice[r]):
            self.choice[r] = best
            return True
        return False

    def threads(self) -> dict[int, dict[int, str]]:
        return {
            r: {tid: self.names[r][self.choice[r][b]] for tid, b in blocks.items()}
            for r, blocks in self.blocks.items()
        }


# Rows ----------------------------------------------------------------------------------


#: Which argument of the call gloo's work span shows (its elements must agree).
_SPAN_ARG = {
    "c10d::allreduce_": 0,
    "c10d::broadcast_": 0,
    "c10d::reduce_": 0,
    "c10d::send": 0,
    "c10d::recv_": 0,
    "c10d::recv_any_source_": 0,
    "c10d::reduce_scatter_": 0,  # each of its all-reduces is one output's size
    "c10d::allgather_": 1,
    "c10d::gather_": 1,
    "c10d::_allgather_base_": 1,
    "c10d::_reduce_scatter_base_": 1,
    "c10d::alltoall_base_": 1,
    "c10d::alltoall_": 1,
}


def _expected_span_numel(name: str, call: _Call) -> int:
    """The element count gloo's work span of ``call`` shows (-1 when not checkable)."""
    dims = call.dims if isinstance(call.dims, list) else []
    index = _SPAN_ARG.get(name, len(dims))
    return _numel(dims[index]) if index < len(dims) else UNKNOWN


def _call_size(call: _Call, rule: str, group_size: int) -> int:
    """Elements of the nccl-tests size of ``call`` (-1 without record_shapes)."""
    if rule == "zero":
        return 0
    dims = call.dims if isinstance(call.dims, list) else []
    index = 0 if rule.startswith("a0") else 1
    n = _numel(dims[index]) if len(dims) > index else UNKNOWN
    if n < 0:
        return UNKNOWN
    return n * max(group_size, 1) if rule.endswith("*n") else n


def _call_dtype(call: _Call, rule: str) -> str:
    types = call.types if isinstance(call.types, list) else []
    index = 0 if rule.startswith("a0") else 1
    return dtypes.canonical(types[index]) if len(types) > index else ""


def _gloo_rows(
    scan: RankScan,
    tid_group: dict[int, str],
    group_info: dict[str, tuple[int, list[int]]],
    stats: Counter,
) -> list[dict[str, Any]]:
    """One row per c10d call, completed by the gloo work span(s) it queued."""
    work = _GlooWork(scan.spans, tid_group, group_info, stats)
    inside_rpc = _inside(scan.calls, scan.rpc)
    rows = []
    for call, nested in zip(scan.calls, inside_rpc, strict=True):
        if nested:  # an NCCL call: its record_param_comms describes it
            continue
        group, matched = work.match(call)
        if not matched:
            stats["calls whose backend work is not in the trace"] += 1
            continue
        size, ranks = group_info.get(group, (scan.world_size or 1, []))
        rows.append(_gloo_row(call, group, size, ranks, matched))
    work.count_left()
    return rows


class _GlooWork:
    """gloo's work spans of one rank, queued per group (first in, first out) and per
    thread for point-to-point, taken by the calls they belong to."""

    def __init__(
        self,
        spans: list[_Span],
        tid_group: dict[int, str],
        group_info: dict[str, tuple[int, list[int]]],
        stats: Counter,
    ) -> None:
        self.queues: dict[str, deque[_Span]] = defaultdict(deque)
        self.p2p: dict[int, deque[_Span]] = defaultdict(deque)
        for s in sorted(spans, key=lambda s: s.ts):
            if s.name in _P2P_SPANS:
                self.p2p[s.tid].append(s)
            elif s.tid in tid_group:
                self.queues[tid_group[s.tid]].append(s)
        self.group_info, self.stats = group_info, stats
        self.default_group = next(iter(group_info), "0")

    def match(self, call: _Call) -> tuple[str, list[_Span]]:
        """The group of ``call`` and the work span(s) it queued (none when not found)."""
        op, _, names = _C10D_OPS[call.name]
        expect = _expected_span_numel(call.name, call)
        if op in ("send", "recv"):
            q = self.p2p[call.tid]
            j = _find(q, names, call.ts, expect)
            if j is None:
                return self.default_group, []
            span = q[j]
            del q[j]
            return self.default_group, [span]
        best = None
        for g, q in self.queues.items():
            j = _find(q, names, call.ts, expect)
            if j is not None and (best is None or q[j].ts < best[2]):
                best = (g, j, q[j].ts)
        if best is None:
            return self.default_group, []
        group, j, _ = best
        return group, self._take(call, group, j)

    def _take(self, call: _Call, group: str, j: int) -> list[_Span]:
        q = self.queues[group]
        for _ in range(j):  # queued ahead of this call: calls not in the trace
            q.popleft()
            self.stats["gloo work without its call"] += 1
        matched = [q.popleft()]
        size = self.group_info.get(group, (1, []))[0]
        if call.name == "c10d::reduce_scatter_":  # the list API: one per rank
            while len(matched) < size and q and q[0].name == matched[0].name:
                matched.append(q.popleft())
        return matched

    def count_left(self) -> None:
        """Work no call took: its call was before the profiling window."""
        for q in list(self.queues.values()) + list(self.p2p.values()):
            self.stats["gloo work without its call"] += len(q)


def _gloo_row(
    call: _Call, group: str, size: int, ranks: list[int], matched: list[_Span]
) -> dict[str, Any]:
    op, rule, _ = _C10D_OPS[call.name]
    numel = _call_size(call, rule, size)
    dtype = _call_dtype(call, rule) or matched[0].dtype
    peer = call.peer
    if peer >= 0 and ranks and peer < len(ranks):
        peer = ranks[peer]  # the call names the group rank
    return {
        "group": group,
        "group_size": size,
        "seq": UNKNOWN,
        "op": op,
        "bytes": max(numel, 0) * dtypes.item_size(dtype) if numel >= 0 else 0,
        "dtype": dtype,
        "peer": peer if op in ("send", "recv") else -1,
        "enter_ns": call.ts,
        "exit_ns": max(s.end for s in matched),
        "timing": "profiler_host",
        "status": "completed",
        "error": None,
        "wait_ns": -1,
        "call_ns": call.ts,
        "_sized": numel >= 0,
    }


def _find(q: deque[_Span], names: tuple[str, ...], ts: int, numel: int) -> int | None:
    """Index of the first span in ``q`` (within the lookahead) that can be the work of a
    call issued at ``ts``: right name, size, and not started before the call."""
    for j, s in enumerate(q):
        if j >= _LOOKAHEAD:
            break
        if s.ts < ts - 1_000 or s.name not in names:
            continue
        if numel >= 0 and s.numel >= 0 and s.numel != numel:
            continue
        return j
    return None


def _inside(calls: list[_Call], rpcs: list[_Rpc]) -> list[bool]:
    """Per call: does a record_param_comms op run inside it (same thread)?"""
    if not rpcs:
        return [False] * len(calls)
    by_tid: dict[int, list[int]] = defaultdict(list)
    for r in rpcs:
        by_tid[r.tid].append(r.ts)
    for values in by_tid.values():
        values.sort()
    out = []
    for c in calls:
        starts = by_tid.get(c.tid, [])
        lo = _bisect_left(starts, c.ts)
        out.append(lo < len(starts) and starts[lo] <= c.end)
    return out


def _bisect_left(values: list[int], x: int) -> int:
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _outermost(rpcs: list[_Rpc]) -> list[_Rpc]:
    """record_param_comms ops not nested in another on the same thread (a barrier that
    issues an all-reduce records both)."""
    out: list[_Rpc] = []
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

    def __init__(self, kernels: list[_Kernel]) -> None:
        self.by_key: dict[tuple[str, int], list[_Kernel]] = defaultdict(list)
        self.by_ext: dict[int, list[_Kernel]] = defaultdict(list)
        self.used: set[int] = set()
        for k in kernels:
            if k.group and k.seq >= 0:
                self.by_key[(k.group, k.seq)].append(k)
            if k.ext >= 0:
                self.by_ext[k.ext].append(k)

    def of(self, r: _Rpc, p2p: bool) -> list[_Kernel]:
        # point-to-point seq counts per peer pair in the trace, per group in the kernel's
        found = [] if p2p else self.by_key.get((r.group, r.seq), [])
        if not found and r.ext >= 0:
            found = self.by_ext.get(r.ext, [])
        return found


def _rpc_row(r: _Rpc, world_size: int | None) -> dict[str, Any]:
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
                _int(p.get("pg_size"), 1),
                [int(x) for x in p.get("ranks") or []],
            )
            for p in scan.pg_config
        } or {"0": (self.world, list(range(self.world)))}
        rows, device = _rpc_rows(scan, self.use_device, stats)
        rows += _gloo_rows(scan, self.tid_groups.get(scan.rank, {}), group_info, stats)
        unsized = sum(1 for row in rows if not row.pop("_sized"))
        steps, rule = _steps(scan)
        frame = RankFrame(
            rank=scan.rank,
            events=(
                pl.DataFrame(rows, schema=tracebuild.INPUT_COLUMNS)
                if rows
                else tracebuild.empty_events()
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
