"""gloo in a profiler trace: which worker threads serve which process group, and each
c10d call completed by the work span(s) it queued (see :mod:`~syncpace.importers.kineto`).
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from itertools import combinations_with_replacement
from typing import Any

from syncpace.importers import dtypes
from syncpace.importers.contract import UNKNOWN
from syncpace.importers.kineto_scan import C10D_OPS, Call, RankScan, Rpc, Span, elements

_P2P_SPANS = ("gloo:send", "gloo:recv", "gloo:recvAnySource")

#: How many queued gloo spans a call looks past (spans of earlier calls not in the trace).
_LOOKAHEAD = 8


# gloo: worker threads -> process groups -------------------------------------------------


def _clusters(spans: Sequence[Span], threads: int) -> dict[int, int]:
    """Worker thread id -> block index: consecutive ids, ``threads`` per gloo backend."""
    tids = sorted({s.tid for s in spans if s.name not in _P2P_SPANS})
    blocks: dict[int, int] = {}
    start, index = None, -1
    for tid in tids:
        if start is None or tid - start >= threads:
            start, index = tid, index + 1
        blocks[tid] = index
    return blocks


def _labels(spans: Sequence[Span], blocks: dict[int, int]) -> list[Counter[tuple[str, int]]]:
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


def _expected_span_numel(name: str, call: Call) -> int:
    """The element count gloo's work span of ``call`` shows (-1 when not checkable)."""
    dims = call.dims if isinstance(call.dims, list) else []
    index = _SPAN_ARG.get(name, len(dims))
    return elements(dims[index]) if index < len(dims) else UNKNOWN


def _call_size(call: Call, rule: str, group_size: int) -> int:
    """Elements of the nccl-tests size of ``call`` (-1 without record_shapes)."""
    if rule == "zero":
        return 0
    dims = call.dims if isinstance(call.dims, list) else []
    index = 0 if rule.startswith("a0") else 1
    n = elements(dims[index]) if len(dims) > index else UNKNOWN
    if n < 0:
        return UNKNOWN
    return n * max(group_size, 1) if rule.endswith("*n") else n


def _call_dtype(call: Call, rule: str) -> str:
    types = call.types if isinstance(call.types, list) else []
    index = 0 if rule.startswith("a0") else 1
    return dtypes.canonical(types[index]) if len(types) > index else ""


def gloo_rows(
    scan: RankScan,
    tid_group: dict[int, str],
    group_info: dict[str, tuple[int, list[int]]],
    stats: Counter,
) -> list[dict[str, Any]]:
    """One row per c10d call of ``scan``, completed by the gloo work span(s) it queued."""
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
        spans: list[Span],
        tid_group: dict[int, str],
        group_info: dict[str, tuple[int, list[int]]],
        stats: Counter,
    ) -> None:
        self.queues: dict[str, deque[Span]] = defaultdict(deque)
        self.p2p: dict[int, deque[Span]] = defaultdict(deque)
        for s in sorted(spans, key=lambda s: s.ts):
            if s.name in _P2P_SPANS:
                self.p2p[s.tid].append(s)
            elif s.tid in tid_group:
                self.queues[tid_group[s.tid]].append(s)
        self.group_info, self.stats = group_info, stats
        self.default_group = next(iter(group_info), "0")

    def match(self, call: Call) -> tuple[str, list[Span]]:
        """The group of ``call`` and the work span(s) it queued (none when not found)."""
        op, _, names = C10D_OPS[call.name]
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

    def _take(self, call: Call, group: str, j: int) -> list[Span]:
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
    call: Call, group: str, size: int, ranks: list[int], matched: list[Span]
) -> dict[str, Any]:
    op, rule, _ = C10D_OPS[call.name]
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


def _find(q: deque[Span], names: tuple[str, ...], ts: int, numel: int) -> int | None:
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


def _inside(calls: list[Call], rpcs: list[Rpc]) -> list[bool]:
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
