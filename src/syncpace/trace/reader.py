"""Load a run directory into columnar tables, validating as it goes.

Every problem is a :class:`~syncpace.errors.TraceError` naming the file and the
problem in one line. Damage a crash can cause (a stream cut short, a rank that never
finished) is tolerated and reported in :attr:`Trace.warnings` instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from syncpace.errors import TraceError
from syncpace.trace import schema

#: What a damaged Arrow file can raise while being decoded.
_DAMAGE = (pa.ArrowException, UnicodeDecodeError, ValueError, OSError, KeyError, IndexError)

#: Sanity bound: larger values are damage, not clusters.
MAX_WORLD_SIZE = 1 << 20

_META_RE = re.compile(r"^rank-(\d{5,})" + re.escape(schema.META_SUFFIX) + "$")


@dataclass(frozen=True)
class Trace:
    """A loaded run: per-rank metadata and the events and steps of all ranks."""

    path: Path
    world_size: int
    meta: dict[int, dict[str, Any]]
    events: pl.DataFrame
    steps: pl.DataFrame
    warnings: tuple[str, ...] = field(default=())

    @property
    def ranks(self) -> list[int]:
        return sorted(self.meta)

    @property
    def missing_ranks(self) -> list[int]:
        return sorted(set(range(self.world_size)) - set(self.meta))


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(path, "not valid JSON (not UTF-8 text)") from exc
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from exc
    if not text.strip():
        raise TraceError(path, "empty metadata file")
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(path, f"not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(meta, dict):
        raise TraceError(path, "metadata is not a JSON object")
    if meta.get("schema") != schema.SCHEMA_NAME:
        raise TraceError(path, f"not a syncpace trace (schema is {meta.get('schema')!r})")
    version = meta.get("schema_version")
    if version not in schema.READABLE_VERSIONS or isinstance(version, bool):
        readable = ", ".join(str(v) for v in schema.READABLE_VERSIONS)
        raise TraceError(
            path,
            f"trace schema version {version!r} is not supported "
            f"(this syncpace reads versions {readable})",
        )
    for key in schema.REQUIRED_META_KEYS:
        if key not in meta:
            raise TraceError(path, f"metadata lacks the key {key!r}")
    for key in ("rank", "world_size"):
        if not isinstance(meta[key], int) or isinstance(meta[key], bool) or meta[key] < 0:
            raise TraceError(path, f"{key} must be a non-negative integer, got {meta[key]!r}")
    if not 1 <= meta["world_size"] <= MAX_WORLD_SIZE:
        raise TraceError(
            path, f"world_size {meta['world_size']} is out of range 1..{MAX_WORLD_SIZE}"
        )
    if meta["rank"] >= meta["world_size"]:
        raise TraceError(path, f"rank {meta['rank']} does not fit world size {meta['world_size']}")
    return meta


def _read_stream(path: Path, expected: pa.Schema, warnings: list[str]) -> pa.Table:
    """Read an Arrow IPC stream, keeping every complete batch of a cut-short file."""
    if not path.exists():
        raise TraceError(path, "missing (the rank's metadata exists, its data file does not)")
    if path.stat().st_size == 0:
        raise TraceError(path, "empty file: no Arrow stream header was written")
    batches = []
    try:
        reader = pa.ipc.open_stream(pa.memory_map(str(path)))
        got = reader.schema
        names = got.names
    except _DAMAGE as exc:
        raise TraceError(path, f"not an Arrow IPC stream ({_first_line(exc)})") from exc
    missing = [f.name for f in expected if f.name not in names]
    if missing:
        raise TraceError(path, f"columns missing: {', '.join(missing)}")
    for f in expected:
        if not got.field(f.name).type.equals(f.type):
            raise TraceError(path, f"column {f.name!r} is {got.field(f.name).type}, not {f.type}")
    while True:
        try:
            batch = reader.read_next_batch()
            # Decoding trusts the buffers' offsets; full validation turns a damaged
            # batch into an exception here instead of a crash later.
            batch.validate(full=True)
            batches.append(batch)
        except StopIteration:
            break
        except _DAMAGE as exc:
            warnings.append(
                f"{path}: cut short after {len(batches)} complete batches "
                f"({_first_line(exc)}); the rank probably died"
            )
            break
    try:
        table = pa.Table.from_batches(batches, schema=got) if batches else expected.empty_table()
        return table.select(expected.names).cast(expected)
    except _DAMAGE as exc:
        raise TraceError(path, f"unreadable columns ({_first_line(exc)})") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def load_trace(path: str | Path, *, allow_missing_ranks: bool = True) -> Trace:
    """Load the run directory ``path``.

    Ranks absent from the directory are reported in ``Trace.warnings`` (or raise when
    ``allow_missing_ranks`` is false); analysis then works on the ranks present.
    """
    root = Path(path)
    if not root.exists():
        raise TraceError(root, "no such directory")
    if not root.is_dir():
        raise TraceError(root, "not a directory (expected a syncpace run directory)")
    meta_files = sorted(p for p in root.iterdir() if _META_RE.match(p.name))
    if not meta_files:
        raise TraceError(
            root, "no syncpace trace here (no rank-*.meta.json files)" + _foreign_hint(root)
        )
    warnings: list[str] = []
    metas: dict[int, dict[str, Any]] = {}
    for meta_path in meta_files:
        meta = _read_meta(meta_path)
        file_rank = int(_META_RE.match(meta_path.name).group(1))  # type: ignore[union-attr]
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
            f"{root}: {len(missing)} of {world_size} ranks have no trace files: {_ranges(missing)}"
        )
        if not allow_missing_ranks:
            raise TraceError(root, message.split(": ", 1)[1])
        warnings.append(message)
    event_tables, step_tables = [], []
    for rank, meta in sorted(metas.items()):
        stem = root / schema.rank_stem(rank)
        events_path = Path(f"{stem}{schema.EVENTS_SUFFIX}")
        if meta["schema_version"] == 1:
            v1 = _read_stream(events_path, schema.EVENTS_V1, warnings)
            event_tables.append(schema.upgrade_events(v1))
        else:
            event_tables.append(_read_stream(events_path, schema.EVENTS, warnings))
        step_tables.append(
            _read_stream(Path(f"{stem}{schema.STEPS_SUFFIX}"), schema.STEPS, warnings)
        )
        if not meta.get("finished", False):
            warnings.append(f"{stem}{schema.META_SUFFIX}: rank {rank} did not finish cleanly")
        if meta.get("dropped_events"):
            warnings.append(f"rank {rank} dropped {meta['dropped_events']} events (buffer full)")
    events = pl.from_arrow(pa.concat_tables(event_tables))
    steps = pl.from_arrow(pa.concat_tables(step_tables))
    assert isinstance(events, pl.DataFrame) and isinstance(steps, pl.DataFrame)
    return Trace(root, world_size, metas, events, steps, tuple(warnings))


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


def _ranges(values: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``: readable lists of ranks."""
    parts: list[str] = []
    start = prev = values[0]
    for v in values[1:] + [None]:  # type: ignore[list-item]
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(parts)
