"""A run directory's validated metadata and the files of each rank, without the data.

:func:`read_metadata` checks the directory and every ``rank-R.meta.json`` (what every
reader starts from); :func:`segment_files` and :func:`rank_files` list a rank's events
files (rotated segments after the first) in the order they are read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncpace.errors import TraceError
from syncpace.trace import schema
from syncpace.trace.validate.checksums import checksum_warning
from syncpace.trace.validate.completeness import ranges
from syncpace.trace.validate.metadata import read_meta

_META_RE = re.compile(r"^rank-(\d{5,})" + re.escape(schema.META_SUFFIX) + "$")
_SUFFIXES = "|".join(re.escape(s) for s in (schema.EVENTS_SUFFIX, schema.STEPS_SUFFIX))
_DATA_RE = re.compile(r"^rank-(\d{5,})(?:" + _SUFFIXES + r"|\.events\.\d{6}\.arrow)$")


class RankSet:
    """The ranks of a run: those it holds (:attr:`meta`) and those of its world it lacks."""

    world_size: int
    meta: dict[int, dict[str, Any]]

    @property
    def ranks(self) -> list[int]:
        return sorted(self.meta)

    @property
    def missing_ranks(self) -> list[int]:
        return sorted(set(range(self.world_size)) - set(self.meta))


@dataclass(frozen=True)
class TraceMeta(RankSet):
    """A run directory's validated metadata, without its data: what every reader of the
    files (the loader, the streaming analysis, the Perfetto export) starts from."""

    path: Path
    world_size: int
    meta: dict[int, dict[str, Any]]
    warnings: tuple[str, ...]

    def stream_paths(self, rank: int) -> tuple[Path, Path]:
        stem = self.path / schema.rank_stem(rank)
        return Path(f"{stem}{schema.EVENTS_SUFFIX}"), Path(f"{stem}{schema.STEPS_SUFFIX}")


def segment_files(root: Path) -> dict[int, list[Path]]:
    """Rank -> its rotated events segments after the first, in order (one listing)."""
    found: dict[int, list[tuple[int, Path]]] = {}
    try:
        names = os.listdir(root)
    except OSError:
        return {}
    for name in names:
        m = schema.SEGMENT_RE.match(name)
        if m:
            found.setdefault(int(m.group(1)), []).append((int(m.group(2)), root / name))
    return {rank: [p for _, p in sorted(v)] for rank, v in found.items()}


def rank_files(
    index: TraceMeta, rank: int, rotated: dict[int, list[Path]] | None = None
) -> tuple[list[Path], Path]:
    """A rank's event files, in order, and its steps file: ``rank-R.events.arrow`` (where
    it exists, or where nothing else does), then its later segments (``rotated``:
    :func:`segment_files` of the directory, listed when not given)."""
    events, steps = index.stream_paths(rank)
    later = (segment_files(index.path) if rotated is None else rotated).get(rank, [])
    files = [events] if events.exists() or events.is_symlink() or not later else []
    return files + later, steps


def read_metadata(path: str | Path, *, allow_missing_ranks: bool = True) -> TraceMeta:
    """Validate the directory ``path`` and every rank's metadata (not the data)."""
    root = Path(path)
    if not root.exists():
        raise TraceError(root, "no such directory")
    if not root.is_dir():
        raise TraceError(root, "not a directory (expected a syncpace run directory)")
    try:
        names = sorted(p.name for p in root.iterdir())
    except OSError as exc:
        raise TraceError(root, f"cannot list the directory: {exc.strerror or exc}") from exc
    meta_files = [root / n for n in names if _META_RE.match(n)]
    if not meta_files:
        raise TraceError(
            root, "no syncpace trace here (no rank-*.meta.json files)" + _foreign_hint(root)
        )
    warnings: list[str] = []
    metas: dict[int, dict[str, Any]] = {}
    meta_paths: dict[int, Path] = {}
    for meta_path in meta_files:
        file_rank = int(_META_RE.match(meta_path.name).group(1))  # type: ignore[union-attr]
        if file_rank in meta_paths:
            raise TraceError(
                meta_path,
                f"a second metadata file for rank {file_rank} (the first is "
                f"{meta_paths[file_rank].name}): two traces were merged into one directory",
            )
        meta_paths[file_rank] = meta_path
        meta = read_meta(meta_path)
        edited = checksum_warning(meta_path, meta)
        if edited:
            warnings.append(edited)
        if meta["rank"] != file_rank:
            raise TraceError(
                meta_path, f"file is named for rank {file_rank} but says rank {meta['rank']}"
            )
        metas[file_rank] = meta
    sizes = {m["world_size"] for m in metas.values()}
    if len(sizes) != 1:
        raise TraceError(root, f"ranks disagree on the world size: {sorted(sizes)}")
    world_size = sizes.pop()
    missing = sorted(set(range(world_size)) - set(metas))
    if missing:
        message = (
            f"{root}: {len(missing)} of {world_size} ranks have no trace files: {ranges(missing)}"
        )
        if not allow_missing_ranks:
            raise TraceError(root, message.split(": ", 1)[1])
        warnings.append(message)
    for name in names:
        data = _DATA_RE.match(name)
        if data and int(data.group(1)) not in metas:
            warnings.append(
                f"{root / name}: data of rank {int(data.group(1))} without its "
                "metadata file; left out"
            )
    return TraceMeta(root, world_size, metas, tuple(warnings))


#: Names other tools give their traces -> the ``syncpace import`` format that reads them.
_FOREIGN = (
    (re.compile(r"\.pt\.trace\.json(\.gz)?$"), "kineto"),
    (re.compile(r"^.+-pid\d+\.log$"), "nccl-inspector"),
)


def _foreign_hint(root: Path, limit: int = 500) -> str:
    """``"; it holds …: run syncpace import …"`` when ``root`` holds another tool's
    traces (by their usual names, or a JSON file that starts like a Chrome trace)."""
    for i, path in enumerate(sorted(root.rglob("*"))):
        if i >= limit:
            break
        fmt = next((f for pattern, f in _FOREIGN if pattern.search(path.name)), None)
        if fmt is None and path.suffix == ".json" and path.is_file():
            try:
                with open(path, "rb") as f:
                    fmt = "kineto" if b'"traceEvents"' in f.read(1 << 16) else None
            except OSError:
                fmt = None
        if fmt is not None:
            return (
                f"; it holds {fmt} files ({path.name}): convert them first with "
                f"`syncpace import {fmt} {root} --out RUN_DIR`"
            )
    return ""
