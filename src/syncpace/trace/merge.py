"""One job written into several directories: recognised, checked, joined or merged.

On a cluster without a shared filesystem every node writes its ranks' files into a
directory of its own (``syncpace run --out /local/run`` under each node's launcher).
Every rank's metadata carries the job's ``job_id``, agreed through the job's
rendezvous store, so directories holding parts of one job are recognised as such:
:func:`group_dirs` sorts a list of directories into jobs, :func:`load_job` loads one
job's parts as one :class:`~syncpace.trace.reader.Trace`, :func:`merge_dirs` copies
every file of them into one directory (``syncpace merge``): rank files, host counters
and facts, fabric link counters, stall records, Flight Recorder dumps, whatever else the
nodes wrote, so the merged directory reads as the directories read together. Loaded
traces are joined by :func:`merge_traces`; :func:`join_parts` finds, among loaded runs,
the parts of one job and joins them, leaving whole runs (the same job at several world
sizes) as they are.

Parts are of one job when they carry the same job id. Traces written before job ids
existed (and Flight Recorder imports) are parts of one job when they agree on the
world size and their ranks do not overlap: two parts of one job, not two runs of it.
"""

from __future__ import annotations

import dataclasses
import filecmp
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from syncpace.errors import TraceError
from syncpace.trace import schema
from syncpace.trace.reader import Trace, load_trace
from syncpace.trace.validate.completeness import ranges

#: The lock a live ``syncpace run`` holds on its directory: no data, and a merged
#: directory is no live run's.
LOCK_NAME = "syncpace.lock"


@dataclasses.dataclass(frozen=True)
class Part:
    """What the metadata files of one directory say about the job it belongs to."""

    path: Path
    job_id: str | None
    world_size: int | None
    ranks: frozenset[int]


def _part(path: Path) -> Part:
    """The job of ``path``, from its metadata files alone (cheap; full validation is
    :func:`~syncpace.trace.reader.load_trace`'s)."""
    ids: set[str] = set()
    sizes: set[int] = set()
    ranks: set[int] = set()
    if path.is_dir():
        for meta_path in sorted(path.glob(f"rank-*{schema.META_SUFFIX}")):
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # load_trace names the damage
            if not isinstance(meta, dict):
                continue
            if isinstance(meta.get("job_id"), str):
                ids.add(meta["job_id"])
            if isinstance(meta.get("world_size"), int):
                sizes.add(meta["world_size"])
            if isinstance(meta.get("rank"), int):
                ranks.add(meta["rank"])
    if len(ids) > 1:
        raise TraceError(path, f"ranks of different jobs in one directory: {sorted(ids)}")
    return Part(
        path, ids.pop() if ids else None, sizes.pop() if len(sizes) == 1 else None, frozenset(ranks)
    )


def group_dirs(paths: Sequence[str | os.PathLike[str]]) -> list[list[Path]]:
    """``paths`` sorted into jobs, in the order each job first appears: directories of
    one job id together; directories without one together when they agree on the world
    size and hold disjoint ranks."""
    groups: list[list[Part]] = []
    for part in (_part(Path(p)) for p in paths):
        for group in groups:
            head = group[0]
            if part.job_id is not None or head.job_id is not None:
                same = part.job_id == head.job_id
            else:
                taken = frozenset().union(*(g.ranks for g in group))
                same = (
                    part.world_size is not None
                    and part.world_size == head.world_size
                    and part.ranks.isdisjoint(taken)
                    and len(part.ranks) < part.world_size
                    and len(taken) < part.world_size
                )
            if same:
                group.append(part)
                break
        else:
            groups.append([part])
    return [[p.path for p in group] for group in groups]


def _check(parts: Sequence[Part]) -> None:
    sizes = {p.world_size for p in parts if p.world_size is not None}
    if len(sizes) > 1:
        raise TraceError(
            parts[0].path, f"parts of one job disagree on the world size: {sorted(sizes)}"
        )
    owner: dict[int, Path] = {}
    for part in parts:
        for rank in sorted(part.ranks):
            if rank in owner:
                raise TraceError(
                    part.path, f"rank {rank} is also in {owner[rank]}: one job's ranks once each"
                )
            owner[rank] = part.path


def _job_files(dirs: Sequence[Path]) -> dict[Path, Path]:
    """Every regular file of the parts (subdirectories included), by its path relative
    to its part; the live run's lock left out. A name two parts both hold is kept once
    when the files are equal, and refused when they differ (neither can stand for the
    other)."""
    files: dict[Path, Path] = {}
    for d in dirs:
        for path in sorted(d.rglob("*")):
            if path.is_symlink() or not path.is_file() or path.name == LOCK_NAME:
                continue
            name = path.relative_to(d)
            other = files.setdefault(name, path)
            if other is not path and not filecmp.cmp(other, path, shallow=False):
                raise TraceError(path, f"differs from {other}: two files of one name in one job")
    return files


def load_job(paths: Sequence[str | os.PathLike[str]]) -> Trace:
    """The parts of one job (directories of the same job) loaded as one trace; its
    ``path`` names them all, and warnings name the files where they lie."""
    dirs = [Path(p) for p in paths]
    if len(dirs) == 1:
        return load_trace(dirs[0])
    for d in dirs:
        if not d.is_dir():
            raise TraceError(d, "no such directory" if not d.exists() else "not a directory")
    _check([_part(d) for d in dirs])
    return merge_traces([load_trace(d) for d in dirs])


def merge_dirs(
    paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *, overwrite: bool = False
) -> dict[str, Any]:
    """Copy every file of the parts of one job into ``out`` (created), after checking
    they are one job. Returns what was merged: the job id, world size, ranks and files
    per part."""
    dirs = [Path(p) for p in paths]
    groups = group_dirs(dirs)
    if len(groups) != 1:
        described = "; ".join(", ".join(map(str, g)) for g in groups)
        raise TraceError(
            dirs[0], f"these directories hold {len(groups)} different jobs: {described}"
        )
    parts = [_part(d) for d in dirs]
    _check(parts)
    target = Path(out)
    if target.exists() and any(target.glob("rank-*")) and not overwrite:
        raise TraceError(
            target, "already holds a trace; choose another --out or add --force to replace it"
        )
    files = _job_files(dirs)
    target.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / name)
    load_trace(target)  # what was written reads as one trace
    return {
        "job_id": parts[0].job_id,
        "world_size": parts[0].world_size,
        "parts": {str(p.path): sorted(p.ranks) for p in parts},
        "files": {str(d): sum(1 for f in files.values() if f.is_relative_to(d)) for d in dirs},
        "out": str(target),
    }


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
    label = " + ".join(str(p.path) for p in parts)
    if missing:  # as the reader words it, naming the directories read together
        warnings.append(
            f"{label}: {len(missing)} of {world} ranks have no trace files: {ranges(missing)}"
        )
    stalls, completeness, hosts = {}, {}, {}
    for p in parts:
        stalls.update(p.stalls)
        completeness.update(p.completeness)
        hosts.update(p.hosts)
    return Trace(
        path=Path(label),
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


def _job_id(trace: Trace) -> str | None:
    ids = {m.get("job_id") for m in trace.meta.values()} - {None}
    return str(ids.pop()) if len(ids) == 1 else None


def join_parts(traces: Sequence[Trace]) -> list[Trace]:
    """``traces`` with the partial directories of one job joined (order kept): parts
    with one job id together; parts without one by world size."""
    out: list[Trace] = []
    pending: dict[tuple[str | None, int], list[Trace]] = {}
    order: list[tuple[str, Any]] = []
    for t in traces:
        if t.missing_ranks:
            key = (_job_id(t), t.world_size)
            if key not in pending:
                order.append(("parts", key))
            pending.setdefault(key, []).append(t)
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
