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

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from syncpace.errors import TraceError
from syncpace.trace import schema, validate
from syncpace.trace.reader import (
    TraceMeta,
    _read_rank_stream,
    account_rank,
    rank_warnings,
)

#: Rows validated together (the rules cost per call, not per row: batch them up).
CHECK_ROWS = 1 << 16
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
)


_SEGMENT_RE = re.compile(r"^rank-(\d{5,})\.seg(\d{6,})" + re.escape(schema.EVENTS_SUFFIX) + "$")


def segments(index: TraceMeta) -> dict[int, list[Path]]:
    """Rotated event segments (``rank-R.segNNNNNN.events.arrow``) per rank, in segment
    order: one listing of the directory for all ranks."""
    found: dict[int, list[tuple[int, Path]]] = {}
    for path in index.path.iterdir():
        m = _SEGMENT_RE.match(path.name)
        if m:
            found.setdefault(int(m.group(1)), []).append((int(m.group(2)), path))
    return {rank: [p for _, p in sorted(items)] for rank, items in found.items()}


def rank_files(
    index: TraceMeta, rank: int, rotated: dict[int, list[Path]] | None = None
) -> tuple[list[Path], Path]:
    """A rank's event files, in order, and its steps file: ``rank-R.events.arrow``,
    then its rotated segments (``rotated``: :func:`segments`, listed when not given)."""
    events, steps = index.stream_paths(rank)
    later = (segments(index) if rotated is None else rotated).get(rank, [])
    files = [events] if events.exists() or events.is_symlink() or not later else []
    return files + later, steps


@dataclass(frozen=True)
class EventFile:
    """The index of one events file: one entry per record batch with valid rows."""

    path: Path
    v1: bool
    arrow_schema: pa.Schema  # as written (columns may come in another order)
    offsets: np.ndarray  # byte offset of each batch's message
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


class _Offsets:
    """Byte offsets of a stream's record batch messages, found by walking the messages
    (headers only: bodies are neither copied nor decompressed)."""

    def __init__(self, path: Path) -> None:
        self._source = pa.memory_map(str(path))
        self._count = -1
        self._at = 0

    def of(self, batch: int) -> int:
        while self._count < batch:
            at = self._source.tell()
            message = pa.ipc.read_message(self._source)
            if message.type == "record batch":
                self._count += 1
                self._at = at
        return self._at

    def close(self) -> None:
        self._source.close()


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
    v1 = meta["schema_version"] == 1
    expected = schema.EVENTS_V1 if v1 else schema.EVENTS
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
        walker = _Offsets(path)
        entries: dict[str, list[Any]] = {"offsets": [], "lo": [], "hi": [], "rows": []}
        keep: dict[int, np.ndarray] = {}
        pending: list[tuple[int, pa.RecordBatch]] = []

        def flush(
            pending: list[tuple[int, pa.RecordBatch]] = pending,
            walker: _Offsets = walker,
            entries: dict[str, list[Any]] = entries,
            keep: dict[int, np.ndarray] = keep,
        ) -> None:
            nonlocal total
            if not pending:
                return
            table = pa.Table.from_batches([b for _, b in pending])
            if v1:
                table = schema.upgrade_events(table)
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
            for batch_no, batch in _merge_slices(pending):
                end = start + batch.num_rows
                m, s = mask[start:end], step[start:end]
                rows = int(m.sum())
                if rows:
                    at = len(entries["offsets"])
                    entries["offsets"].append(walker.of(batch_no))
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
                pending.append((stream.batch, piece))
                rows_pending += piece.num_rows
                if rows_pending >= CHECK_ROWS:
                    flush()
                    rows_pending = 0
            flush()
        except validate.DAMAGE as exc:
            raise TraceError(path, f"unreadable columns ({validate.first_line(exc)})") from exc
        finally:
            walker.close()
        if stream.cut:
            warnings.append(f"{path}: {stream.cut}")
        if stream.corrupt_rows:
            ev_bad.reasons["in batches failing their checksum"] = (
                ev_bad.reasons.get("in batches failing their checksum", 0) + stream.corrupt_rows
            )
        files.append(
            EventFile(
                path,
                v1,
                stream._reader.schema,
                np.array(entries["offsets"], dtype=np.int64),
                np.array(entries["lo"], dtype=np.int64),
                np.array(entries["hi"], dtype=np.int64),
                np.array(entries["rows"], dtype=np.int64),
                keep,
            )
        )
        if len(event_paths) > 1 and stream is not first_stream:
            _fold(first_stream, stream)
    assert first_stream is not None
    st_table, st_stream = _read_rank_stream(steps_path, schema.STEPS, warnings)
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
    pending: list[tuple[int, pa.RecordBatch]],
) -> list[tuple[int, pa.RecordBatch | pa.Table]]:
    """The slices of ``pending`` joined back into their record batches, in order."""
    out: list[tuple[int, Any]] = []
    for batch_no, piece in pending:
        if out and out[-1][0] == batch_no:
            out[-1] = (batch_no, _Rows(out[-1][1].num_rows + piece.num_rows))
        else:
            out.append((batch_no, _Rows(piece.num_rows)))
    return out


@dataclass(frozen=True)
class _Rows:
    num_rows: int


def _fold(into: validate.Stream, other: validate.Stream) -> None:
    """Account a later segment's stream in the first one's (rows, cuts, checksums)."""
    into.rows += other.rows
    into.corrupt_rows += other.corrupt_rows
    into.corrupt_batches.extend(other.corrupt_batches)
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
        sources: dict[int, Any] = {}
        try:
            for f, entry in scan.batches(lo, hi):
                ef = scan.files[f]
                key = (scan.rank, f, entry)
                batch = cache.get(key) if cache is not None else None
                if batch is None:
                    if f not in sources:
                        sources[f] = pa.memory_map(str(ef.path))
                    batch = _decode(sources[f], ef, entry, columns)
                if cache is not None and ef.hi[entry] >= hi:
                    held[key] = batch
                step = batch.column("step").to_numpy()
                sel = (step >= lo) & (step < hi)
                if entry in ef.keep:
                    sel &= ef.keep[entry]
                if sel.all():
                    out.append(batch)
                elif sel.any():
                    out.append(batch.filter(pa.array(sel)))
        except validate.DAMAGE as exc:
            raise TraceError(
                scan.files[0].path, f"changed since it was read ({validate.first_line(exc)})"
            ) from exc
        finally:
            for source in sources.values():
                source.close()
    if cache is not None:
        cache.keep(held)
    if not out:
        return target.empty_table()
    return pa.Table.from_batches(out, schema=target)


def _decode(source: Any, ef: EventFile, entry: int, columns: tuple[str, ...]) -> pa.RecordBatch:
    source.seek(int(ef.offsets[entry]))
    batch = pa.ipc.read_record_batch(pa.ipc.read_message(source), ef.arrow_schema)
    if ef.v1:
        table = schema.upgrade_events(pa.Table.from_batches([batch]))
        batch = table.combine_chunks().to_batches()[0]
    batch = batch.select(list(columns))
    target = pa.schema([schema.EVENTS.field(c) for c in columns])
    return batch.cast(target) if batch.schema != target else batch
