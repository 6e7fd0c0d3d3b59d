"""One job from several directories: each node of a multi-node job may write its ranks
into its own run directory (a node-local disk, one directory per host).

:func:`merge_traces` joins such parts into one :class:`~syncpace.trace.reader.Trace`;
:func:`join_parts` finds, among several loaded directories, the ones that are parts of
one job (the same world size, disjoint ranks, none complete alone) and joins them,
leaving whole runs (e.g. the same job at several world sizes) as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from syncpace.errors import TraceError
from syncpace.trace.reader import Trace


def merge_traces(parts: Sequence[Trace]) -> Trace:
    """The job whose ranks ``parts`` hold between them (disjoint ranks, one world size)."""
    if not parts:
        raise TraceError(Path("."), "no trace to merge")
    if len(parts) == 1:
        return parts[0]
    sizes = {p.world_size for p in parts}
    if len(sizes) != 1:
        paths = ", ".join(str(p.path) for p in parts)
        raise TraceError(paths, f"parts disagree on the world size: {sorted(sizes)}")
    meta: dict = {}
    for p in parts:
        clash = set(meta) & set(p.meta)
        if clash:
            raise TraceError(p.path, f"ranks {sorted(clash)} appear in two directories")
        meta.update(p.meta)
    world = sizes.pop()
    missing = sorted(set(range(world)) - set(meta))
    warnings = [w for p in parts for w in p.warnings if "ranks have no trace files" not in w]
    if missing:
        warnings.append(f"{len(missing)} of {world} ranks have no trace files: {missing[:20]}")
    stalls, completeness, hosts = {}, {}, {}
    for p in parts:
        stalls.update(p.stalls)
        completeness.update(p.completeness)
        hosts.update(p.hosts)
    return Trace(
        path=Path(" + ".join(str(p.path) for p in parts)),
        world_size=world,
        meta=meta,
        events=pl.concat([p.events for p in parts], how="vertical"),
        steps=pl.concat([p.steps for p in parts], how="vertical"),
        warnings=tuple(warnings),
        completeness=completeness,
        counters=pl.concat([p.counters for p in parts], how="vertical"),
        hosts=hosts,
        stalls=stalls,
    )


def join_parts(traces: Sequence[Trace]) -> list[Trace]:
    """``traces`` with the partial directories of one job joined (order kept)."""
    out: list[Trace] = []
    pending: dict[int, list[Trace]] = {}
    order: list[tuple[str, int]] = []
    for t in traces:
        if t.missing_ranks:
            if t.world_size not in pending:
                order.append(("parts", t.world_size))
            pending.setdefault(t.world_size, []).append(t)
        else:
            order.append(("whole", len(out)))
            out.append(t)
    result: list[Trace] = []
    for kind, key in order:
        if kind == "whole":
            result.append(out[key])
            continue
        parts = pending[key]
        ranks = [set(p.meta) for p in parts]
        disjoint = sum(len(r) for r in ranks) == len(set().union(*ranks))
        result.extend([merge_traces(parts)] if disjoint else parts)
    return result
