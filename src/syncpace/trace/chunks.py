"""A run's events a window of steps at a time: the reader for analyses that stream.

Two passes over each rank's files, both with bounded memory:

1. :func:`scan_rank` reads one rank's streams to their end, record batch by record
   batch (memory-mapped), and applies every rule of the loader
   (:mod:`syncpace.trace.validate`: schema, CRC-32 per batch, row invariants, duplicate
   calls, step order, declared versus found). It keeps the rank's steps (one row per
   iteration), its completeness account and warnings, the *index* of its events — per
   record batch: where the batch's message starts, the range of steps its valid rows
   cover, and which rows were left out (only where some were) — and per step the
   rank's last call (for measures that look one call back across a window boundary).
2. :func:`read_window` reads the events of steps ``[lo, hi)`` of every rank from the
   index: only the batches that cover them, decoded message by message, with the
   scan's quarantine applied. A :class:`BatchCache` keeps the one batch per rank that
   reaches into the next window, so a sequential reader decodes each batch once.

A rank's events may come in several files (rotated segments); :func:`rank_files` lists
them in order, and everything below works on that list. Memory is bounded by one
window's events plus one batch per rank, never by the length of the trace.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from syncpace.errors import TraceError
from syncpace.trace import schema, validate
from syncpace.trace.reader import (
    TraceMeta,
    account_rank,
    rank_warnings,
    read_steps_file,
    segment_files,
)

#: Rows validated together (the rules cost per call, not per row: batch them up).
CHECK_ROWS = 1 << 16
#: Rows of many ranks validated together by a :class:`Sweep`.
GROUP_ROWS = 1 << 18
#: Bytes a :class:`Sweep` has the kernel read ahead of it in all ranks' files at most,
#: shared among them (``validate.Stream``'s ``prefetch``), each file's share within
#: :data:`PREFETCH_RANGE`: at 4,096 ranks a window reads a few kilobytes of each file.
PREFETCH_BYTES = 1 << 30
PREFETCH_RANGE = (1 << 17, 1 << 23)
#: The columns the analysis reads from events (the others stay undecoded in memory).
ANALYSIS_COLUMNS = (
    "rank",
    "step",
    "group",
    "group_size",
    "seq",
    "op",
    "bytes",
    "peer",
    "enter_ns",
    "exit_ns",
    "status",
    "timing",
    "wait_ns",
)


def segments(index: TraceMeta) -> dict[int, list[Path]]:
    """Rotated event segments after the first (``schema.segment_name``) per rank, in
    segment order: one listing of the directory for all ranks."""
    return segment_files(index.path)


def rank_files(
    index: TraceMeta, rank: int, rotated: dict[int, list[Path]] | None = None
) -> tuple[list[Path], Path]:
    """A rank's event files, in order, and its steps file: ``rank-R.events.arrow``,
    then its later segments (``rotated``: :func:`segments`, listed when not given)."""
    events, steps = index.stream_paths(rank)
    later = (segments(index) if rotated is None else rotated).get(rank, [])
    files = [events] if events.exists() or events.is_symlink() or not later else []
    return files + later, steps


@dataclass(frozen=True)
class EventFile:
    """The index of one events file: one entry per record batch with valid rows."""

    path: Path
    version: int  # the schema version that wrote it
    arrow_schema: pa.Schema  # as written (columns may come in another order)
    offsets: np.ndarray  # byte offset of each batch's message
    ends: np.ndarray  # and where it ends
    lo: np.ndarray  # smallest step of its valid rows
    hi: np.ndarray  # largest step
    rows: np.ndarray  # valid rows
    keep: dict[int, np.ndarray] = field(default_factory=dict)  # entry -> rows kept


@dataclass(frozen=True)
class RankScan:
    """One rank read to its end: steps, account, warnings and the index of its events."""

    rank: int
    files: tuple[EventFile, ...]
    steps: pa.Table
    completeness: validate.RankCompleteness
    warnings: tuple[str, ...]
    events: int  # valid events
    #: Per step with events: the rank's last call by enter time (ties: the later row),
    #: its enter and exit (-1 when the call did not complete).
    tail_step: np.ndarray
    tail_enter: np.ndarray
    tail_exit: np.ndarray

    def batches(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """(file, entry) of the batches holding events of steps ``[lo, hi)``."""
        out = []
        for f, ef in enumerate(self.files):
            hit = np.flatnonzero((ef.hi >= lo) & (ef.lo < hi))
            out.extend((f, int(e)) for e in hit)
        return out


class _Seen:
    """The calls a rank has written so far, for the loader's duplicate rule (first
    occurrence in file order wins). Per call key (group, op, peer), the sequence
    numbers seen, as sorted disjoint intervals: a rank's numbers count up, so each key
    usually holds one interval, whatever the length of the run."""

    def __init__(self) -> None:
        self._lo: dict[tuple[Any, ...], np.ndarray] = {}
        self._hi: dict[tuple[Any, ...], np.ndarray] = {}

    def first(self, table: pa.Table) -> np.ndarray:
        """Mask of the rows of ``table`` whose call was not seen before; remembers them."""
        n = table.num_rows
        keep = np.ones(n, dtype=bool)
        if n == 0:
            return keep
        seq = table.column("seq").to_numpy()
        bounds = [pc.min_max(table.column(c)) for c in ("group", "op", "peer")]
        if all(b["min"] == b["max"] for b in bounds):  # the usual case: one kind of call
            key = (bounds[0]["min"].as_py(), bounds[1]["min"].as_py(), str(bounds[2]["min"]))
            parts: list[tuple[tuple[Any, ...], Any]] = [(key, slice(None))]
        else:
            code = pc.dictionary_encode(
                pc.binary_join_element_wise(
                    table.column("group"),
                    table.column("op"),
                    pc.cast(table.column("peer"), pa.string()),
                    "\x00",
                )
            ).combine_chunks()
            idx = code.indices.to_numpy()
            parts = [
                (tuple(str(v).split("\x00")), np.flatnonzero(idx == i))
                for i, v in enumerate(code.dictionary.to_pylist())
            ]
        for key, rows in parts:
            s = seq[rows]
            ok = self._first(key, s)
            if not ok.all():
                sub = keep[rows]
                sub &= ok
                keep[rows] = sub
        return keep

    def _first(self, key: tuple[Any, ...], s: np.ndarray) -> np.ndarray:
        lo, hi = self._lo.get(key), self._hi.get(key)
        increasing = len(s) < 2 or bool(np.all(s[1:] > s[:-1]))
        if increasing and (hi is None or s[0] > hi[-1]):
            ok = np.ones(len(s), dtype=bool)
        else:
            ok = np.zeros(len(s), dtype=bool)
            _, first = np.unique(s, return_index=True)
            ok[first] = True
            if lo is not None and hi is not None:
                at = np.searchsorted(lo, s, side="right") - 1
                ok &= ~((at >= 0) & (s <= hi[np.maximum(at, 0)]))
        self._remember(key, np.unique(s[ok]) if not increasing else s[ok])
        return ok

    def extend(self, key: tuple[Any, ...], first: int, last: int) -> bool:
        """Remember the numbers ``first..last`` (all new) of ``key`` if they go on where
        the key's numbers stopped (or it has none): what :meth:`first` would do for them.
        False, changing nothing, when they do not (then call :meth:`first`)."""
        hi = self._hi.get(key)
        if hi is None:
            self._lo[key] = np.array([first], dtype=np.int64)
            self._hi[key] = np.array([last], dtype=np.int64)
            return True
        if first == hi[-1] + 1:
            hi[-1] = last
            return True
        return False

    def _remember(self, key: tuple[Any, ...], new: np.ndarray) -> None:
        if len(new) == 0:
            return
        lo, hi = self._lo.get(key), self._hi.get(key)
        contiguous = bool(new[-1] - new[0] == len(new) - 1)
        if lo is not None and hi is not None and contiguous and new[0] == hi[-1] + 1:
            hi[-1] = new[-1]  # the usual case: the run goes on
            return
        cut = np.flatnonzero(np.diff(new) != 1) + 1
        new_lo, new_hi = new[np.r_[0, cut]], new[np.r_[cut - 1, len(new) - 1]]
        if lo is not None and hi is not None:
            new_lo, new_hi = np.concatenate((lo, new_lo)), np.concatenate((hi, new_hi))
            order = np.argsort(new_lo, kind="stable")
            new_lo, new_hi = new_lo[order], new_hi[order]
            reach = np.maximum.accumulate(new_hi)
            start = np.r_[True, new_lo[1:] > reach[:-1] + 1]
            group = np.cumsum(start) - 1
            merged_hi = np.full(int(group[-1]) + 1, np.iinfo(np.int64).min, dtype=np.int64)
            np.maximum.at(merged_hi, group, new_hi)
            new_lo, new_hi = new_lo[start], merged_hi
        self._lo[key], self._hi[key] = new_lo.astype(np.int64), new_hi.astype(np.int64)


def scan_rank(
    index: TraceMeta, rank: int, rotated: dict[int, list[Path]] | None = None
) -> RankScan:
    """Read and validate rank ``rank``'s files to their end (see the module docstring).
    Raises :class:`~syncpace.errors.TraceError` where :func:`load_trace` would."""
    meta = index.meta[rank]
    stem = index.path / schema.rank_stem(rank)
    event_paths, steps_path = rank_files(index, rank, rotated)
    if not event_paths:
        event_paths = [index.stream_paths(rank)[0]]
    version = meta["schema_version"]
    expected = schema.events_schema(version)
    warnings: list[str] = []
    ev_bad = validate.Quarantine()
    seen = _Seen()
    files: list[EventFile] = []
    tails: list[np.ndarray] = []
    first_stream: validate.Stream | None = None
    total = 0
    for path in event_paths:
        if not path.exists() and not path.is_symlink():
            raise TraceError(path, "missing (the rank's metadata exists, its data file does not)")
        stream = validate.Stream(path, expected)
        first_stream = first_stream or stream
        entries: dict[str, list[Any]] = {k: [] for k in ("offsets", "ends", "lo", "hi", "rows")}
        keep: dict[int, np.ndarray] = {}
        # each slice with its batch's extent in the file (where its message starts, ends)
        pending: list[tuple[tuple[int, int], pa.RecordBatch]] = []

        def flush(
            pending: list[tuple[tuple[int, int], pa.RecordBatch]] = pending,
            entries: dict[str, list[Any]] = entries,
            keep: dict[int, np.ndarray] = keep,
        ) -> None:
            nonlocal total
            if not pending:
                return
            table = pa.Table.from_batches([b for _, b in pending])
            if version != schema.SCHEMA_VERSION:
                table = schema.upgrade_events(table, version)
            n = table.num_rows
            table = table.append_column("__row", pa.array(np.arange(n, dtype=np.int64)))
            kept, bad = validate.check_events(table, rank, index.world_size)
            ev_bad.add(bad)
            mask = np.zeros(n, dtype=bool)
            mask[kept.column("__row").to_numpy()] = True
            first = seen.first(kept)
            if not first.all():
                ev_bad.reasons["duplicate call"] = ev_bad.reasons.get("duplicate call", 0) + int(
                    (~first).sum()
                )
                mask[kept.column("__row").to_numpy()[~first]] = False
                kept = kept.filter(pa.array(first))
            total += kept.num_rows
            step = pc.fill_null(table.column("step"), -1).to_numpy()
            if kept.num_rows:
                tails.append(_tails(kept))
            start = 0
            for (at_byte, end_byte), batch in _merge_slices(pending):
                end = start + batch.num_rows
                m, s = mask[start:end], step[start:end]
                rows = int(m.sum())
                if rows:
                    at = len(entries["offsets"])
                    entries["offsets"].append(at_byte)
                    entries["ends"].append(end_byte)
                    entries["lo"].append(int(s[m].min()))
                    entries["hi"].append(int(s[m].max()))
                    entries["rows"].append(rows)
                    if rows < len(m):
                        keep[at] = m.copy()
                start = end
            pending.clear()

        try:
            rows_pending = 0
            for piece in stream.batches():
                pending.append(((stream.offset, stream.end), piece))
                rows_pending += piece.num_rows
                if rows_pending >= CHECK_ROWS:
                    flush()
                    rows_pending = 0
            flush()
        except validate.DAMAGE as exc:
            raise TraceError(path, f"unreadable columns ({validate.first_line(exc)})") from exc
        if stream.cut:
            warnings.append(f"{path}: {stream.cut}")
        if stream.corrupt_rows:
            ev_bad.reasons["in batches failing their checksum"] = (
                ev_bad.reasons.get("in batches failing their checksum", 0) + stream.corrupt_rows
            )
        files.append(
            EventFile(
                path,
                version,
                stream._reader.schema,
                np.array(entries["offsets"], dtype=np.int64),
                np.array(entries["ends"], dtype=np.int64),
                np.array(entries["lo"], dtype=np.int64),
                np.array(entries["hi"], dtype=np.int64),
                np.array(entries["rows"], dtype=np.int64),
                keep,
            )
        )
        if len(event_paths) > 1 and stream is not first_stream:
            _fold(first_stream, stream)
    assert first_stream is not None
    st_table, st_stream = read_steps_file(steps_path, meta, warnings)
    st_kept, st_bad = validate.check_steps(st_table, rank)
    if st_stream.corrupt_rows:
        st_bad.reasons["in batches failing their checksum"] = st_stream.corrupt_rows
    st_kept, order = validate.check_step_order(st_kept)
    st_bad.add(order)
    account = account_rank(rank, meta, stem, (first_stream, ev_bad), (st_stream, st_bad), warnings)
    warnings.extend(rank_warnings(rank, meta, stem))
    step, enter, exit_ = _reduce_tails(tails)
    return RankScan(
        rank, tuple(files), st_kept, account, tuple(warnings), total, step, enter, exit_
    )


def _merge_slices(
    pending: list[tuple[tuple[int, int], pa.RecordBatch]],
) -> list[tuple[tuple[int, int], _Rows]]:
    """The slices of ``pending`` joined back into their record batches (the slices of
    one batch share its extent), in order: each batch's rows."""
    out: list[tuple[tuple[int, int], _Rows]] = []
    for extent, piece in pending:
        if out and out[-1][0] == extent:
            out[-1] = (extent, _Rows(out[-1][1].num_rows + piece.num_rows))
        else:
            out.append((extent, _Rows(piece.num_rows)))
    return out


@dataclass(frozen=True)
class _Rows:
    num_rows: int


def _fold(into: validate.Stream, other: validate.Stream) -> None:
    """Account a later segment's stream in the first one's (rows, cuts, checksums)."""
    into.rows += other.rows
    into.corrupt_rows += other.corrupt_rows
    into.corrupt_batches.extend(other.corrupt_batches)
    into.unvouched_rows += other.unvouched_rows
    into.unvouched_batches[:] = [  # named by segment once there are several
        *(b if isinstance(b, str) else f"{into.path.name}:{b}" for b in into.unvouched_batches),
        *(f"{other.path.name}:{b}" for b in other.unvouched_batches),
    ]
    into.cut = into.cut or other.cut
    into.has_eos = other.has_eos


def _tails(kept: pa.Table) -> np.ndarray:
    """Per step of ``kept``: (step, enter, exit) of the last call by enter (ties: later)."""
    step = kept.column("step").to_numpy()
    enter = kept.column("enter_ns").to_numpy()
    exit_ = kept.column("exit_ns").to_numpy()
    done = pc.equal(kept.column("status"), "completed").to_numpy(zero_copy_only=False)
    exit_ = np.where(done, exit_, -1)
    if len(step) > 1 and np.all(step[1:] >= step[:-1]):
        change = np.r_[step[1:] != step[:-1], True]
        if np.all((enter[1:] >= enter[:-1]) | change[:-1]):  # in order: the last row wins
            pick = np.flatnonzero(change)
            return np.stack((step[pick], enter[pick], exit_[pick]), axis=1)
    order = np.lexsort((np.arange(len(step)), enter, step))
    last = np.r_[step[order][1:] != step[order][:-1], True]
    pick = order[last]
    return np.stack((step[pick], enter[pick], exit_[pick]), axis=1)


def _reduce_tails(tails: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not tails:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    rows = np.concatenate(tails)
    order = np.lexsort((np.arange(len(rows)), rows[:, 1], rows[:, 0]))
    rows = rows[order]
    last = np.r_[rows[1:, 0] != rows[:-1, 0], True]
    rows = rows[last]
    return rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2].copy()


def carry(scans: list[RankScan], world_size: int, first: int, lo: int) -> np.ndarray:
    """Per rank (indexed by rank): the exit of its last call in steps ``[first, lo)``
    (-1 when there is none or it did not complete): the call before a window's first."""
    out = np.full(world_size, -1, dtype=np.int64)
    for scan in scans:
        sel = (scan.tail_step >= first) & (scan.tail_step < lo)
        if sel.any():
            enter, exit_ = scan.tail_enter[sel], scan.tail_exit[sel]
            best = len(enter) - 1 - int(np.argmax(enter[::-1]))  # latest, later step on ties
            out[scan.rank] = exit_[best]
    return out


class BatchCache:
    """The decoded batch of each rank that reaches past the window just read, kept for
    the next one (one batch per rank: the bounded leftover of a sequential reader)."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, int, int], pa.RecordBatch] = {}

    def get(self, key: tuple[int, int, int]) -> pa.RecordBatch | None:
        return self._held.get(key)

    def keep(self, held: dict[tuple[int, int, int], pa.RecordBatch]) -> None:
        self._held = held


def read_window(
    scans: list[RankScan],
    lo: int,
    hi: int,
    *,
    cache: BatchCache | None = None,
    columns: tuple[str, ...] = ANALYSIS_COLUMNS,
) -> pa.Table:
    """The valid events of steps ``[lo, hi)`` of every rank in ``scans`` (rank order,
    file order within a rank), with ``columns`` only."""
    out = []
    held: dict[tuple[int, int, int], pa.RecordBatch] = {}
    target = pa.schema([schema.EVENTS.field(c) for c in columns])
    for scan in scans:
        sources: dict[int, int] = {}
        try:
            for f, entry in scan.batches(lo, hi):
                ef = scan.files[f]
                key = (scan.rank, f, entry)
                batch = cache.get(key) if cache is not None else None
                if batch is None:
                    if f not in sources:
                        sources[f] = _random_access(ef.path)
                    batch = _decode(sources[f], ef, entry, columns)
                if cache is not None and ef.hi[entry] >= hi:
                    held[key] = batch
                _select(batch, ef, entry, lo, hi, out)
        except validate.DAMAGE as exc:
            raise TraceError(
                scan.files[0].path, f"changed since it was read ({validate.first_line(exc)})"
            ) from exc
        finally:
            for fd in sources.values():
                os.close(fd)
    if cache is not None:
        cache.keep(held)
    return _joined(out, target)


def read_steps(
    scans: list[RankScan], steps: list[int], *, columns: tuple[str, ...] = ANALYSIS_COLUMNS
) -> pa.Table:
    """The valid events of each of ``steps`` of every rank in ``scans``: rank by rank,
    the steps in the order given, file order within a step (what one
    :func:`read_window` of each rank and step gives, joined). A rank's files are opened
    once and a batch holding several of the steps decoded once."""
    out: list[pa.RecordBatch] = []
    target = pa.schema([schema.EVENTS.field(c) for c in columns])
    for scan in scans:
        sources: dict[int, int] = {}
        decoded: dict[tuple[int, int], pa.RecordBatch] = {}
        try:
            for step in steps:
                for f, entry in scan.batches(step, step + 1):
                    ef = scan.files[f]
                    batch = decoded.get((f, entry))
                    if batch is None:
                        if f not in sources:
                            sources[f] = _random_access(ef.path)
                        batch = decoded[(f, entry)] = _decode(sources[f], ef, entry, columns)
                    _select(batch, ef, entry, step, step + 1, out)
        except validate.DAMAGE as exc:
            raise TraceError(
                scan.files[0].path, f"changed since it was read ({validate.first_line(exc)})"
            ) from exc
        finally:
            for fd in sources.values():
                os.close(fd)
    return _joined(out, target)


def _select(batch: pa.RecordBatch, ef: EventFile, entry: int, lo: int, hi: int, out: list) -> None:
    """Append to ``out`` the rows of ``batch`` (entry ``entry`` of ``ef``) the scan kept
    whose step is in ``[lo, hi)``."""
    # a null step (a row the scan left out) is in no window
    step = validate.column_numpy(batch.column("step"), lo - 1)
    sel = (step >= lo) & (step < hi)
    if entry in ef.keep:
        sel &= ef.keep[entry]
    if sel.all():
        out.append(batch)
    elif sel.any():
        out.append(batch.filter(pa.array(sel)))


def _joined(batches: list[pa.RecordBatch], target: pa.Schema) -> pa.Table:
    if not batches:
        return target.empty_table()
    # Contiguous: polars converts a table of thousands of small chunks several times slower.
    return pa.Table.from_batches(batches, schema=target).combine_chunks()


def _random_access(path: Path) -> int:
    """A descriptor of ``path`` for reading a few batches where the index says they are,
    the kernel told not to read ahead: a step of every rank is a batch in each of
    thousands of files, and the read-ahead of each (8 MiB on the disks measured here)
    made a 38 GB run's analysis read 66 GB from disk (39 GB read this way). Opened as
    the sweep opened it: a file replaced since by something that blocks is refused."""
    fd, _ = validate.open_regular(path, validate.MAX_STREAM_BYTES, "data file")
    with contextlib.suppress(OSError, AttributeError):  # only a hint
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    return fd


def _decode(fd: int, ef: EventFile, entry: int, columns: tuple[str, ...]) -> pa.RecordBatch:
    at, end = int(ef.offsets[entry]), int(ef.ends[entry])
    body = os.pread(fd, end - at, at)
    if len(body) < end - at:
        raise ValueError(f"{len(body):,} of the {end - at:,} bytes of a batch")
    # The schema's message then this one, read as a stream on one thread (read_record_batch
    # takes no options, and its thread pool doubles the cost of a flush-sized batch).
    stream = pa.BufferReader(pa.py_buffer(_schema_message(ef.arrow_schema) + body))
    batch = pa.ipc.open_stream(stream, options=_ONE_THREAD).read_next_batch()
    if ef.version != schema.SCHEMA_VERSION:
        table = schema.upgrade_events(pa.Table.from_batches([batch]), ef.version)
        batch = table.combine_chunks().to_batches()[0]
    batch = batch.select(list(columns))
    target = pa.schema([schema.EVENTS.field(c) for c in columns])
    return batch.cast(target) if batch.schema != target else batch


# One pass ------------------------------------------------------------------------------
class CannotSweep(Exception):
    """A run :class:`Sweep` does not read: :func:`scan_rank` and :func:`read_window`
    read it instead (two passes)."""


class OutOfOrder(CannotSweep):
    """A rank's file holds events of a step the sweep has already passed (steps written
    out of order)."""


def _open_files_for(ranks: int) -> bool:
    """Whether this process may hold one file of every rank open (raising its soft
    limit on open files up to the hard one if needed)."""
    need = ranks + 256
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < need:
            top = need if hard == resource.RLIM_INFINITY else min(need, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
            soft = top
    except (OSError, ValueError):  # pragma: no cover - no such limit here
        return True
    return soft == resource.RLIM_INFINITY or soft >= need


_ANALYSIS = pa.schema([schema.EVENTS.field(c) for c in ANALYSIS_COLUMNS])


class _Cursor:
    """One rank's event files, read forward one record batch at a time."""

    def __init__(
        self, index: TraceMeta, rank: int, rotated: dict[int, list[Path]], prefetch: int = 0
    ) -> None:
        self.rank = rank
        self._prefetch = prefetch
        event_paths, self.steps_path = rank_files(index, rank, rotated)
        if not event_paths:
            event_paths = [index.stream_paths(rank)[0]]
        self.version = index.meta[rank]["schema_version"]
        self._expected = schema.events_schema(self.version)
        for path in event_paths:
            if not path.exists() and not path.is_symlink():
                raise TraceError(
                    path, "missing (the rank's metadata exists, its data file does not)"
                )
        self.paths = event_paths
        # Read, not mapped: a mapped file's pages count as this process's memory, and
        # thousands of ranks' files are open at once. One file of a rank open at a time.
        self.streams = [
            validate.Stream(event_paths[0], self._expected, mapped=False, prefetch=prefetch)
        ]
        self._file = 0
        self._batches = self.streams[0].batches()
        self.done = False
        self.reached = -1  # the largest step in the batches read so far
        self.seen = _Seen()
        self.bad = validate.Quarantine()
        self.total = 0
        # The index of the files, as :func:`scan_rank` builds it (for re-reading a step).
        self.entries: list[dict[str, list[Any]]] = [
            {k: [] for k in ("batch", "offsets", "ends", "lo", "hi", "rows", "size")}
            for _ in self.paths
        ]
        self.keep: list[dict[int, np.ndarray]] = [{} for _ in self.paths]

    @property
    def path(self) -> Path:
        return self.streams[min(self._file, len(self.streams) - 1)].path

    def read_until(self, hi: int) -> list[tuple[int, int, tuple[int, int], pa.RecordBatch]]:
        """The next batches, up to the first one holding a step at or after ``hi`` (none
        when one read before does; all at the end): (file, batch number, extent, batch),
        the extent where the batch's message starts and ends in the file."""
        out: list[tuple[int, int, tuple[int, int], pa.RecordBatch]] = []
        while not self.done and self.reached < hi:
            try:
                piece = next(self._batches)
            except StopIteration:
                self._file += 1
                if self._file == len(self.paths):
                    self.done = True
                    break
                self.streams.append(
                    validate.Stream(
                        self.paths[self._file],
                        self._expected,
                        mapped=False,
                        prefetch=self._prefetch,
                    )
                )
                self._batches = self.streams[self._file].batches()
                continue
            except validate.DAMAGE as exc:  # pragma: no cover - Stream.batches catches it
                raise TraceError(
                    self.path, f"unreadable columns ({validate.first_line(exc)})"
                ) from exc
            stream = self.streams[self._file]
            if not piece.num_rows:  # the writer's first batch (it puts the schema there)
                continue
            if self.version != schema.SCHEMA_VERSION:
                piece = schema.upgrade_events(pa.Table.from_batches([piece]), self.version)
                piece = piece.select(schema.EVENTS.names).combine_chunks().to_batches()[0]
            out.append((self._file, stream.batch, (stream.offset, stream.end), piece))
            top = _largest(piece.column("step"))
            if top is not None:
                self.reached = max(self.reached, top)
        return out

    def record(
        self,
        file: int,
        batch: int,
        extent: tuple[int, int],
        mask: np.ndarray,
        counted: tuple[int, int, int],
    ) -> None:
        """Index one batch (a later slice of a large batch joins its batch's entry):
        ``mask`` its valid rows, ``counted`` how many there are and their smallest and
        largest step (``_NO_STEP`` and -1 when none)."""
        e = self.entries[file]
        rows, lo, hi = counted
        self.total += rows
        if e["batch"] and e["batch"][-1] == batch:
            at = len(e["batch"]) - 1
            prior = self.keep[file].pop(at, None)
            full = np.concatenate(
                (np.ones(e["size"][-1], dtype=bool) if prior is None else prior, mask)
            )
            e["lo"][-1], e["hi"][-1] = min(e["lo"][-1], lo), max(e["hi"][-1], hi)
            e["rows"][-1] += rows
            e["size"][-1] += len(mask)
            if not full.all():
                self.keep[file][at] = full
            return
        if rows < len(mask):
            self.keep[file][len(e["batch"])] = mask.copy()
        e["batch"].append(batch)
        e["offsets"].append(extent[0])
        e["ends"].append(extent[1])
        e["lo"].append(lo)
        e["hi"].append(hi)
        e["rows"].append(rows)
        e["size"].append(len(mask))

    def finish(
        self,
        steps: pa.Table,
        steps_stream: validate.Stream,
        steps_bad: validate.Quarantine,
        steps_warnings: list[str],
        index: TraceMeta,
    ) -> RankScan:
        """The rank's scan, as :func:`scan_rank` returns it (without the per-step tails)."""
        warnings = [f"{s.path}: {s.cut}" for s in self.streams if s.cut]
        warnings.extend(steps_warnings)
        first = self.streams[0]
        for other in self.streams:
            if other.corrupt_rows:
                self.bad.reasons["in batches failing their checksum"] = (
                    self.bad.reasons.get("in batches failing their checksum", 0)
                    + other.corrupt_rows
                )
            if other is not first:
                _fold(first, other)
        meta = index.meta[self.rank]
        stem = index.path / schema.rank_stem(self.rank)
        account = account_rank(
            self.rank, meta, stem, (first, self.bad), (steps_stream, steps_bad), warnings
        )
        warnings.extend(rank_warnings(self.rank, meta, stem))
        files = tuple(
            _event_file(stream, self.version, e, keep)
            for stream, e, keep in zip(self.streams, self.entries, self.keep, strict=True)
        )
        empty = np.zeros(0, dtype=np.int64)
        return RankScan(
            self.rank, files, steps, account, tuple(warnings), self.total, empty, empty, empty
        )


_NO_STEP = np.iinfo(np.int64).max
#: The widest window, and the furthest first window's end: within numpy's int64,
#: whatever span of steps a damaged steps file claims.
_WIDEST = 1 << 62
_ONE_THREAD = pa.ipc.IpcReadOptions(use_threads=False)
_SCHEMA_MESSAGES: dict[pa.Schema, bytes] = {}


def _schema_message(arrow_schema: pa.Schema) -> bytes:
    found = _SCHEMA_MESSAGES.get(arrow_schema)
    if found is None:
        found = _SCHEMA_MESSAGES[arrow_schema] = arrow_schema.serialize().to_pybytes()
    return found


def _event_file(
    stream: validate.Stream, version: int, e: dict[str, list[Any]], keep: dict[int, np.ndarray]
) -> EventFile:
    """The index of one file from a sweep's entries: the batches with valid rows."""
    rows = np.array(e["rows"], dtype=np.int64)
    used = np.flatnonzero(rows > 0)
    renumber = {int(old): new for new, old in enumerate(used)}
    return EventFile(
        stream.path,
        version,
        stream._reader.schema,
        np.array(e["offsets"], dtype=np.int64)[used],
        np.array(e["ends"], dtype=np.int64)[used],
        np.array(e["lo"], dtype=np.int64)[used],
        np.array(e["hi"], dtype=np.int64)[used],
        rows[used],
        {renumber[k]: m for k, m in keep.items() if k in renumber},
    )


#: A batch a cursor read: (cursor, file, batch number, extent in the file, batch).
_Read = tuple[_Cursor, int, int, tuple[int, int], pa.RecordBatch]


class Sweep:
    """Every rank's events read once, in lockstep, a window of steps at a time.

    Each window reads, for every rank, the record batches up to the first that reaches
    past the window (the rest of it is held for the next window: one batch per rank),
    validates the new rows of all ranks together (:func:`validate.events_valid`; a rank
    whose rows break a rule is then checked alone for the reasons), drops the calls
    seen before (per rank, :class:`_Seen`), and yields the window's valid events in
    rank order, file order within a rank — what :func:`read_window` returns for it,
    but with the names dictionary-encoded (:func:`analysis_frame` reads both).
    Each rank's account is made when its files end (:meth:`scans`), with the index
    :func:`scan_rank` builds, so single steps can be read again (the report's samples).

    A row of a step before the current window (steps written out of order) raises
    :class:`OutOfOrder`."""

    def __init__(self, index: TraceMeta, *, warmup_steps: int, window_events: int) -> None:
        self.index = index
        if not _open_files_for(len(index.ranks)):
            raise CannotSweep("too few open files allowed for one per rank")
        rotated = segments(index)
        low, high = PREFETCH_RANGE
        prefetch = min(max(PREFETCH_BYTES // (2 * max(len(index.ranks), 1)), low), high)
        self.cursors: list[_Cursor] = []
        self._steps: list[tuple[pa.Table, validate.Stream, validate.Quarantine, list[str]]] = []
        for rank in index.ranks:  # the files of every rank opened (and checked) first
            cursor = _Cursor(index, rank, rotated, prefetch)
            warnings: list[str] = []
            st_table, st_stream = read_steps_file(cursor.steps_path, index.meta[rank], warnings)
            st_kept, st_bad = validate.check_steps(st_table, rank)
            if st_stream.corrupt_rows:
                st_bad.reasons["in batches failing their checksum"] = st_stream.corrupt_rows
            st_kept, order = validate.check_step_order(st_kept)
            st_bad.add(order)
            self.cursors.append(cursor)
            self._steps.append((st_kept, st_stream, st_bad, warnings))
        found = [pc.min_max(t.column("step")) for t, *_ in self._steps if t.num_rows]
        max_step = max((int(m["max"].as_py()) for m in found), default=0)
        min_step = min((int(m["min"].as_py()) for m in found), default=0)
        self.cut = warmup_steps if warmup_steps and max_step >= warmup_steps else None
        # Rows before it are none of the analysis' (the warm-up is read: a call some rank
        # made in it is left out whole, by the caller, with the rows of the next step).
        self.first = 0
        expected = sum(_expected_events(index, c) for c in self.cursors)
        span = max(max_step - min_step + 1, 1)
        self.width = max(1, min(int(window_events * span / max(expected, 1)), _WIDEST))
        self.estimate = max(1, (max_step + 1 - self.first) // self.width + 1)
        self.min_step: int | None = None  # of the valid rows
        self.windows: list[tuple[int, int]] = []
        #: The first window's end (the warm-up with the step after it).
        self._first_hi = (
            self.width if self.cut is None else min(max(self.width, self.cut + 1), _WIDEST)
        )
        #: Validated rows not yet in a window, a group per read.
        self._pending: list[_Held] = []
        #: Per cursor, what its ``reached`` and ``done`` say (a window asks every rank).
        self._reached = np.full(len(self.cursors), -1, dtype=np.int64)
        self._done = np.zeros(len(self.cursors), dtype=bool)

    def __iter__(self) -> Iterator[tuple[tuple[int, int], pa.Table]]:
        """``((lo, hi), events)`` per window with events, in step order (each rank's call
        before a window is its reader's to carry: the analysis takes it from the
        window's matched calls)."""
        lo = self.first
        while True:
            hi = (lo // self.width + 1) * self.width
            if lo == self.first and self.cut is not None:
                hi = max(hi, self.cut + 1)  # the warm-up with the step after it
            table = self._read(lo, hi)
            if table.num_rows:
                self.windows.append((lo, hi))
                yield (lo, hi), table
            if self._done.all() and not self._pending:
                return
            lo = hi
            if not table.num_rows and self._pending:  # skip the steps nobody has
                ahead = min(p.next_step() for p in self._pending)
                lo = max(hi, ahead // self.width * self.width)

    def _read(self, lo: int, hi: int) -> pa.Table:
        new: list[_Read] = []
        rows = 0
        # Only the ranks whose batches read so far end before ``hi`` read on (in rank
        # order): with many ranks a window is a few steps, a batch several windows.
        for i in np.flatnonzero((self._reached < hi) & ~self._done):
            cursor = self.cursors[i]
            for item in cursor.read_until(hi):
                new.append((cursor, *item))
                rows += item[3].num_rows
            self._reached[i], self._done[i] = cursor.reached, cursor.done
            if rows >= GROUP_ROWS:  # validated and cut to the analysis columns in groups:
                self._hold(self._validated(new), lo)  # decoded batches do not pile up
                new, rows = [], 0
        self._hold(self._validated(new), lo)
        # The window's rows of every held group, in rank order, file order within a rank
        # (groups were read in file order, and each is held with its window order):
        # gathered from each straight into the window's columns, one copy.
        pieces = []
        first, last = self._window_of(np.array([lo, hi - 1], dtype=np.int64))
        for held in self._pending:
            a, b = held.rows_of(first, last)
            if b > a:
                pieces.append((held, a, b))
            held.start = b
        self._pending = [p.rest() for p in self._pending if p.top >= hi]
        if not pieces:
            return _ANALYSIS.empty_table()
        return _window_table(pieces)

    def _window_of(self, step: np.ndarray) -> np.ndarray:
        """The window each step falls in, numbered in step order (the first window's
        steps 0; every other window is ``width`` steps from a multiple of it)."""
        return np.where(step < self._first_hi, 0, step // self.width)

    def _hold(self, table: pa.Table, lo: int) -> None:
        if not table.num_rows:
            return
        step = table.column("step").to_numpy()
        if step.min() < lo and ((step < lo) & (step >= self.first)).any():
            raise OutOfOrder(f"steps before {lo} after the sweep passed them")
        self._pending.append(_Held.of(table, self._window_of(step), int(step.max())))

    def _validated(self, new: list[_Read]) -> pa.Table:
        """The valid rows of the batches just read (every rule of the loader), indexed."""
        if not new:
            return _ANALYSIS.empty_table()
        sizes = np.array([item[4].num_rows for item in new], dtype=np.int64)
        # One copy into contiguous columns: every kernel after it runs once, not per batch.
        raw = _contiguous(pa.Table.from_batches([item[4] for item in new], schema=schema.EVENTS))
        rank = np.repeat(np.array([item[0].rank for item in new], dtype=np.int64), sizes)
        # Per cursor: its rows are one run of ``raw`` (cursors come in rank order).
        cursors: list[_Cursor] = []
        starts: list[int] = []
        at = 0
        for item, size in zip(new, sizes, strict=True):
            if not cursors or cursors[-1] is not item[0]:
                cursors.append(item[0])
                starts.append(at)
            at += int(size)
        bounds = [*starts, at]
        # What the windows keep, its strings dictionary-encoded first: the rules on them
        # then test each name once, and the valid rows are taken from it.
        analysis = _compact(raw.select(list(ANALYSIS_COLUMNS)))
        checked = raw
        for name in _STRINGS:
            at_column = raw.schema.get_field_index(name)
            checked = checked.set_column(at_column, name, analysis.column(name))
        try:
            ok = validate.events_valid(checked, rank, self.index.world_size)
        except validate.DAMAGE:
            ok = None
        for c, a, b in zip(cursors, bounds[:-1], bounds[1:], strict=True):
            if ok is None or not ok[a:b].all():  # this rank alone: the loader's reasons
                sub = raw.slice(a, b - a)
                sub = sub.append_column("__row", pa.array(np.arange(b - a, dtype=np.int64)))
                try:
                    kept, bad = validate.check_events(sub, c.rank, self.index.world_size)
                except validate.DAMAGE as exc:
                    raise TraceError(
                        c.path, f"unreadable columns ({validate.first_line(exc)})"
                    ) from exc
                c.bad.add(bad)
                if ok is None:
                    ok = np.ones(len(rank), dtype=bool)
                mask = np.zeros(b - a, dtype=bool)
                mask[kept.column("__row").to_numpy()] = True
                ok[a:b] = mask
        assert ok is not None
        self._first_calls(raw, analysis, ok, cursors, bounds)
        starts_of = np.r_[0, np.cumsum(sizes)[:-1]]
        counted = _per_batch(validate.column_numpy(raw.column("step"), -1), ok, starts_of)
        for (c, file, batch, extent, _), at, size, count in zip(
            new, starts_of.tolist(), sizes.tolist(), counted, strict=True
        ):
            c.record(file, batch, extent, ok[at : at + size], count)
        valid = analysis if ok.all() else analysis.filter(pa.array(ok))
        if valid.num_rows:
            low = int(pc.min(valid.column("step")).as_py())
            self.min_step = low if self.min_step is None else min(self.min_step, low)
        return valid

    def _first_calls(
        self,
        raw: pa.Table,
        analysis: pa.Table,
        ok: np.ndarray,
        cursors: list[_Cursor],
        bounds: list[int],
    ) -> None:
        """The loader's duplicate rule (first occurrence in file order) on the valid rows:
        unset ``ok`` where a call was seen before. One pass for all ranks when the
        window holds one kind of call and every rank's numbers go on where they were."""
        if not ok.any():
            return
        key = _one_call(analysis, ok)
        seq = validate.column_numpy(raw.column("seq"), -1)
        # the usual group: every row valid, one kind of call: the runs' numbers checked
        # together, each rank then only told where its run starts and ends
        runs = _counting_runs(seq, bounds) if key is not None and ok.all() else None
        step_ok = np.flatnonzero(ok) if runs is None else None
        counting, firsts, lasts = runs if runs is not None else ([], [], [])
        for i, (c, a, b) in enumerate(zip(cursors, bounds[:-1], bounds[1:], strict=True)):
            rows = None
            if step_ok is None:
                if counting[i] and c.seen.extend(key, firsts[i], lasts[i]):
                    continue
            else:
                rows = step_ok[(step_ok >= a) & (step_ok < b)] if not ok[a:b].all() else None
                s = seq[a:b] if rows is None else seq[rows]
                if not len(s):
                    continue
                if key is not None:
                    if (len(s) < 2 or bool(np.all(np.diff(s) == 1))) and c.seen.extend(
                        key, int(s[0]), int(s[-1])
                    ):
                        continue
            sub = raw.slice(a, b - a)
            if rows is not None:
                sub = sub.filter(pa.array(ok[a:b]))
            first = c.seen.first(sub)
            if not first.all():
                c.bad.reasons["duplicate call"] = c.bad.reasons.get("duplicate call", 0) + int(
                    (~first).sum()
                )
                where = np.arange(a, b) if rows is None else rows
                ok[where[~first]] = False

    def scans(self) -> list[RankScan]:
        """Every rank's scan (call after the last window)."""
        return [
            cursor.finish(*steps, self.index)
            for cursor, steps in zip(self.cursors, self._steps, strict=True)
        ]

    @property
    def plan_first(self) -> int:
        """The first step analysed, as :func:`~syncpace.analysis.streaming.plan` has it."""
        return self.cut or 0

    def steps_tables(self) -> list[pa.Table]:
        return [t for t, *_ in self._steps]


class _Held:
    """A group of validated rows not all analysed yet: its columns as numpy arrays (the
    names as codes into :attr:`names`), and the window order of its rows: ``order``
    (None when the rows are in it already), ``windows`` (ascending) and ``bounds``,
    where each window's rows start in that order (and the end); ``top`` its largest
    step. The rows from :attr:`start` on, in window order, are still to come.

    The rows are not moved into window order: a window gathers its rows from each
    group straight into its own columns (:func:`_window_table`), so a row is copied
    once between being validated and being analysed, not three times (into window
    order, then a slice of it joined into the window, 18 % of the 100M case)."""

    def __init__(
        self,
        columns: dict[str, np.ndarray],
        names: dict[str, list[str]],
        order: np.ndarray | None,
        windows: np.ndarray,
        bounds: np.ndarray,
        top: int,
    ) -> None:
        self.columns, self.names, self.order = columns, names, order
        self.windows, self._bounds, self.top = windows, bounds, top
        self.start = 0

    @classmethod
    def of(cls, table: pa.Table, window: np.ndarray, top: int) -> _Held:
        """``table`` (validated rows: no nulls; names dictionary-encoded), whose rows are
        of windows ``window``."""
        columns: dict[str, np.ndarray] = {}
        names: dict[str, list[str]] = {}
        for name in table.column_names:
            column = table.column(name)
            chunk = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
            if pa.types.is_dictionary(chunk.type):
                names[name] = chunk.dictionary.to_pylist()
                chunk = chunk.indices
            columns[name] = chunk.to_numpy()
        order, windows, bounds = _window_order(window)
        return cls(columns, names, order, windows, bounds, top)

    @property
    def num_rows(self) -> int:
        return int(self._bounds[-1])

    def rows_of(self, first: int, last: int) -> tuple[int, int]:
        """The rows of windows ``first..last`` (positions in window order)."""
        i, j = np.searchsorted(self.windows, (first, last + 1))
        return int(self._bounds[i]), int(self._bounds[j])

    def rows(self, a: int, b: int) -> np.ndarray | slice:
        """Where positions ``a..b`` of the window order are among the held rows."""
        return slice(a, b) if self.order is None else self.order[a:b]

    def next_step(self) -> int:
        """The step of the first row still to come."""
        at = self.start if self.order is None else int(self.order[self.start])
        return int(self.columns["step"][at])

    def rest(self) -> _Held:
        """Without its analysed rows once they are most of it: copying the rest then
        costs at most as much again, and memory stays about the rows still to come,
        not the batches they came in."""
        n = self.num_rows
        if 4 * self.start < 3 * n:
            return self
        rows = self.rows(self.start, n)
        kept = {name: values[rows] for name, values in self.columns.items()}
        if isinstance(rows, slice):  # a view would hold the whole group
            kept = {name: values.copy() for name, values in kept.items()}
        later = self._bounds[1:] > self.start  # the windows with rows still to come
        bounds = np.append(np.maximum(self._bounds[:-1][later], self.start), n)
        return _Held(kept, self.names, None, self.windows[later], bounds - self.start, self.top)


def _counting_runs(
    seq: np.ndarray, bounds: list[int]
) -> tuple[list[bool], list[int], list[int]] | None:
    """Per run of rows ``bounds[i]..bounds[i + 1]`` (a rank's rows of a group): whether
    its numbers count up by one, its first and its last; None when a run is empty."""
    edges = np.asarray(bounds, dtype=np.int64)
    starts, ends = edges[:-1], edges[1:]
    if not len(starts) or bool((ends <= starts).any()):
        return None
    breaks = np.flatnonzero(np.diff(seq[: int(ends[-1])]) != 1)  # between rows i and i + 1
    run = np.searchsorted(ends, breaks, side="right")  # the run of row i
    counting = np.ones(len(starts), dtype=bool)
    counting[run[breaks + 1 < ends[run]]] = False  # row i + 1 in the same run
    return counting.tolist(), seq[starts].tolist(), seq[ends - 1].tolist()


def _per_batch(step: np.ndarray, ok: np.ndarray, starts: np.ndarray) -> list[tuple[int, int, int]]:
    """Per batch of a group (its rows from ``starts`` on): its valid rows, their smallest
    and largest step (``_NO_STEP`` and -1 when none). Reduced for all batches at once:
    a batch's own sums and extremes cost more in calls than in work."""
    if not len(starts):
        return []
    if ok.all():
        rows = np.diff(np.r_[starts, len(step)])
        lo = np.minimum.reduceat(step, starts)
        hi = np.maximum.reduceat(step, starts)
    else:
        rows = np.add.reduceat(ok.astype(np.int64), starts)
        lo = np.minimum.reduceat(np.where(ok, step, _NO_STEP), starts)
        hi = np.maximum.reduceat(np.where(ok, step, -1), starts)
    none = rows == 0
    if none.any():
        lo, hi = np.where(none, _NO_STEP, lo), np.where(none, -1, hi)
    return list(zip(rows.tolist(), lo.tolist(), hi.tolist(), strict=True))


def _window_order(window: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """The rows in window order (None when they are), the windows present (ascending)
    and where each starts in that order (and the end). A stable order keeps rank and
    file order within a window; a group spans a few windows, so their numbers from the
    smallest fit 16 bits, which numpy sorts by radix (a pass per byte)."""
    n = len(window)
    if n == 0:
        return None, np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    low = int(window.min())
    span = int(window.max()) - low + 1
    if n > 1 and not (window[1:] < window[:-1]).any():
        order = None
    elif span <= 1 << 16:
        order = np.argsort((window - low).astype(np.uint16), kind="stable")
    else:
        order = np.argsort(window, kind="stable")
    if span <= 4 * n + 1024:
        counts = np.bincount(window - low, minlength=span)
        present = np.flatnonzero(counts)
        windows = present + low
        bounds = np.r_[0, np.cumsum(counts[present])]
    else:
        windows, counts = np.unique(window, return_counts=True)
        bounds = np.r_[0, np.cumsum(counts)]
    return order, windows.astype(np.int64), bounds.astype(np.int64)


def _window_table(pieces: list[tuple[_Held, int, int]]) -> pa.Table:
    """One window's table from its pieces, rows ``a..b`` (in window order) of held
    groups: each column gathered from the pieces straight into one array, the names
    kept as codes under one dictionary (the pieces' merged, values in order of first
    appearance), for :func:`analysis_frame`. In rank order, file order within a rank:
    each piece is; the pieces too unless two groups read in different windows overlap
    in ranks, and then a stable sort by rank puts a rank's earlier group first."""
    total = sum(b - a for _, a, b in pieces)
    first = pieces[0][0]
    columns: dict[str, np.ndarray] = {}
    dictionaries: dict[str, list[str]] = {}
    for name, values in first.columns.items():
        if name in first.names:
            columns[name], dictionaries[name] = _gathered_codes(name, pieces, total)
            continue
        out = np.empty(total, dtype=values.dtype)
        at = 0
        for h, a, b in pieces:
            rows = h.rows(a, b)
            if isinstance(rows, slice):
                out[at : at + b - a] = h.columns[name][rows]
            else:
                # "clip" (the rows are in range): numpy buffers a checked take into out
                np.take(h.columns[name], rows, out=out[at : at + b - a], mode="clip")
            at += b - a
        columns[name] = out
    rank = columns["rank"]
    edges = np.cumsum([b - a for _, a, b in pieces])[:-1]
    if len(edges) and (rank[edges - 1] > rank[edges]).any():
        order = np.argsort(rank, kind="stable")
        columns = {name: values[order] for name, values in columns.items()}
    arrays = [
        pa.DictionaryArray.from_arrays(pa.array(values), pa.array(dictionaries[name], pa.string()))
        if name in dictionaries
        else pa.array(values)
        for name, values in columns.items()
    ]
    return pa.Table.from_arrays(arrays, names=list(columns))


def _gathered_codes(
    name: str, pieces: list[tuple[_Held, int, int]], total: int
) -> tuple[np.ndarray, list[str]]:
    """A name column's codes of the pieces under one dictionary, and that dictionary.
    Pieces with the same dictionary (the usual case: the same few names all along)
    have their codes gathered as they are; others through a map of their codes."""
    dictionaries = [h.names[name] for h, _, _ in pieces]
    merged: dict[str, int] = {}
    maps = []
    for dictionary in dictionaries:
        maps.append(np.array([merged.setdefault(v, len(merged)) for v in dictionary], np.int32))
    kind = np.int8 if len(merged) <= 127 else np.int32
    out = np.empty(total, dtype=kind)
    at = 0
    for (h, a, b), remap in zip(pieces, maps, strict=True):
        codes = h.columns[name][h.rows(a, b)]
        identity = len(remap) == 0 or bool((remap == np.arange(len(remap))).all())
        out[at : at + b - a] = codes if identity else remap[codes]
        at += b - a
    return out, list(merged)


def _one_call(analysis: pa.Table, ok: np.ndarray) -> tuple[Any, ...] | None:
    """The call key (group, op, peer) every ``ok`` row of ``analysis`` has, if one: its
    names are dictionary codes there, compared as numbers."""
    every = bool(ok.all())
    key: list[Any] = []
    for name in ("group", "op"):
        column = analysis.column(name)
        if column.num_chunks != 1 or not pa.types.is_dictionary(column.type):
            return None
        chunk = column.chunk(0)
        codes = chunk.indices.to_numpy(zero_copy_only=False)
        codes = codes if every else codes[ok]
        if not np.all(codes == codes[0]):
            return None
        key.append(chunk.dictionary[int(codes[0])].as_py())
    peer = pc.fill_null(analysis.column("peer"), 0).to_numpy()
    peer = peer if every else peer[ok]
    if not np.all(peer == peer[0]):
        return None
    return (*key, str(int(peer[0])))


#: The string columns of the analysis, held dictionary-encoded between windows.
_STRINGS = tuple(c for c in ANALYSIS_COLUMNS if pa.types.is_string(schema.EVENTS.field(c).type))
_CODES = pa.dictionary(pa.int8(), pa.string())


def _compact(table: pa.Table) -> pa.Table:
    """``table`` with its string columns dictionary-encoded (one byte a row where a
    column holds at most 127 values): with thousands of ranks, the rows read ahead
    of the window (a batch per rank) are most of the sweep's memory, and these
    columns hold a few names each (97 bytes a row in all become 56)."""
    columns = []
    for name in table.column_names:
        column = table.column(name)
        if name in _STRINGS:
            chunks = [_encoded(c) for c in column.chunks]
            if all(c is not None for c in chunks):
                column = pa.chunked_array(chunks, _CODES)
            else:  # more than 127 distinct values
                column = pc.dictionary_encode(column)
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)


#: A column with more runs of equal values than its rows over this is hashed row by row.
_ROWS_PER_RUN = 8


def _encoded(column: pa.Array) -> pa.DictionaryArray | None:
    """A string column dictionary-encoded with int8 codes, its values in order of first
    appearance, as a cast does; None when it holds more than 127 values. A rank writes
    long runs of one value (one group, op, status, timing source call after call): only
    the first value of each run is hashed, not every row (measured on the four columns:
    28 ns a row, against 64 ns hashed row by row)."""
    n = len(column)
    if n < 2 or column.null_count:
        return _cast(column)
    if _constant(column):
        return pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, dtype=np.int8), pa.int8()),
            pa.array([column[0].as_py()], pa.string()),
        )
    change = pc.not_equal(column.slice(1), column.slice(0, n - 1))
    heads = np.flatnonzero(change.to_numpy(zero_copy_only=False)) + 1
    if (len(heads) + 1) * _ROWS_PER_RUN > n:
        return _cast(column)
    heads = np.r_[0, heads]
    first = pc.dictionary_encode(column.take(pa.array(heads)))
    if len(first.dictionary) > 127:
        return None
    codes = np.repeat(first.indices.to_numpy().astype(np.int8), np.diff(np.r_[heads, n]))
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), first.dictionary)


def _constant(column: pa.Array) -> bool:
    """Whether every value of a string column without nulls is its first: each row of
    the same length, the bytes the first one's repeated. The usual column of a rank (one
    group, op, status, timing source all along) is one value: two passes of memory
    comparison, not a comparison of every row with the next (0.2 ms against 1.1 ms for
    a group of 262,000 rows)."""
    if not pa.types.is_string(column.type):
        return False
    n = len(column)
    _, offsets, data = column.buffers()
    if offsets is None or data is None:
        return False
    at = np.frombuffer(offsets, dtype=np.int32, count=n + 1, offset=column.offset * 4)
    start, width = int(at[0]), int(at[1]) - int(at[0])
    if int(at[-1]) - start != n * width:
        return False
    if n > 1 and not bool((np.diff(at) == width).all()):
        return False
    values = memoryview(data)[start : start + n * width]
    return bytes(values) == bytes(values[:width]) * n


def _cast(column: pa.Array) -> pa.DictionaryArray | None:
    try:
        return column.cast(_CODES)
    except pa.ArrowInvalid:  # more than 127 distinct values
        return None


def _contiguous(raw: pa.Table) -> pa.Table:
    """``raw`` with the columns the rules and the windows read each in one piece; the
    others (the dtype, the error text) left in their batches, read only for nulls.
    Arrow joins them, a table at once: on a group of 260 flush-sized batches, 2.9 ms
    against 8.6 ms for numpy joining the integer columns one by one."""
    joined = raw.select(list(ANALYSIS_COLUMNS)).combine_chunks()
    columns = [
        joined.column(n) if n in ANALYSIS_COLUMNS else raw.column(n) for n in raw.column_names
    ]
    return pa.Table.from_arrays(columns, schema=raw.schema)


def analysis_frame(table: pa.Table, *, categorical: bool = False) -> pl.DataFrame:
    """An analysis table as polars, its dictionary-encoded names as strings: each
    column's codes gathered from its dictionary, in polars (no Arrow strings made).

    ``categorical``: the names as polars categoricals instead (a window's hot path
    compares and groups them, never shows them), converted by polars from the
    dictionaries as they are (2.3 ms for a window of 409,600 events, against 11 ms
    for strings); the caller turns what it keeps of them into strings. A column of one
    name (its dictionary one value) is that name repeated, made by polars without a
    row's conversion (0.02 ms against 0.9 ms for 409,600 rows)."""
    if categorical:
        one = {n: v for n in table.column_names if (v := _one_name(table.column(n))) is not None}
        converted = pl.from_arrow(table.drop_columns(list(one)) if one else table)
        assert isinstance(converted, pl.DataFrame)
        if not one:
            return converted
        n = table.num_rows
        repeated = {
            k: pl.Series(k, [v], dtype=pl.Categorical).new_from_index(0, n) for k, v in one.items()
        }
        return converted.with_columns(**repeated).select(table.column_names)
    encoded = [n for n in table.column_names if pa.types.is_dictionary(table.schema.field(n).type)]
    frame = pl.from_arrow(table.drop_columns(encoded))
    assert isinstance(frame, pl.DataFrame)
    if not encoded:
        return frame
    names = {}
    for name in encoded:
        column = table.column(name).combine_chunks()
        values = pl.Series(name, column.dictionary.to_pylist(), dtype=pl.String)
        codes = column.indices.to_numpy(zero_copy_only=False).astype(np.uint32)
        names[name] = values.gather(codes)
    return frame.with_columns(**names).select(table.column_names)


def _one_name(column: pa.ChunkedArray) -> str | None:
    """The one name a dictionary-encoded column without nulls holds, if its dictionary
    is that name alone (every code then points at it)."""
    if column.num_chunks != 1 or not pa.types.is_dictionary(column.type):
        return None
    chunk = column.chunk(0)
    if chunk.null_count or len(chunk.dictionary) != 1 or not len(chunk):
        return None
    value = chunk.dictionary[0].as_py()
    return value if isinstance(value, str) else None


def _largest(column: pa.ChunkedArray | pa.Array) -> int | None:
    """The largest value of an integer column (``None`` when it has none)."""
    if column.null_count == 0:
        values = column.to_numpy()
        return int(values.max()) if len(values) else None
    top = pc.max(column).as_py()
    return None if top is None else int(top)


def _expected_events(index: TraceMeta, cursor: _Cursor) -> int:
    """About how many events a rank's files hold (sizes the windows): what a finished
    rank declares, else its files' size at 40 bytes an event."""
    declared = index.meta[cursor.rank].get("events_written")
    if isinstance(declared, int) and declared >= 0 and cursor.streams[0].has_eos:
        return declared
    size = 0
    for path in cursor.paths:
        try:
            size += path.stat().st_size
        except OSError:  # pragma: no cover - removed while open
            pass
    return size // 40
