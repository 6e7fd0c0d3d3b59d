"""The index of a rank's events: where each record batch lies, which steps its valid
rows cover, and which rows were left out, so that any window of steps is read again
from the batches holding it (:mod:`syncpace.trace.read.window`).

:func:`scan_rank` reads one rank's files to their end (memory-mapped) through
:class:`~syncpace.trace.read.rank.RankEvents`, every rule of the loader applied
(schema, CRC-32 per batch, row invariants, duplicate calls, step order, declared
versus found), and keeps the rank's steps, its completeness account and warnings, the
index of its events (:class:`BatchIndex`, built the same way by the one-pass sweep)
and per step the rank's last call (for measures that look one call back across a
window boundary).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from syncpace.trace import schema
from syncpace.trace.read.account import account_rank, rank_warnings
from syncpace.trace.read.meta import TraceMeta
from syncpace.trace.read.rank import CHECK_ROWS, RankEvents, checked_steps
from syncpace.trace.validate.completeness import RankCompleteness
from syncpace.trace.validate.rows import Quarantine, column_numpy
from syncpace.trace.validate.stream import Stream

#: A batch's smallest step when it holds no valid row.
NO_STEP = np.iinfo(np.int64).max


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
    completeness: RankCompleteness
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


class BatchIndex:
    """A rank's index as its batches are read: one entry per batch (a later slice of a
    large batch joins its batch's entry), made into :class:`EventFile` s at the end."""

    def __init__(self, files: int) -> None:
        self.total = 0  # valid rows
        self._entries: list[dict[str, list[Any]]] = [
            {k: [] for k in ("batch", "offsets", "ends", "lo", "hi", "rows", "size")}
            for _ in range(files)
        ]
        self._keep: list[dict[int, np.ndarray]] = [{} for _ in range(files)]

    def record(
        self,
        file: int,
        batch: int,
        extent: tuple[int, int],
        mask: np.ndarray,
        counted: tuple[int, int, int],
    ) -> None:
        """Index one slice of a batch: ``mask`` its valid rows, ``counted`` how many
        there are and their smallest and largest step (:data:`NO_STEP` and -1 when
        none)."""
        e = self._entries[file]
        rows, lo, hi = counted
        self.total += rows
        if e["batch"] and e["batch"][-1] == batch:
            at = len(e["batch"]) - 1
            prior = self._keep[file].pop(at, None)
            full = np.concatenate(
                (np.ones(e["size"][-1], dtype=bool) if prior is None else prior, mask)
            )
            e["lo"][-1], e["hi"][-1] = min(e["lo"][-1], lo), max(e["hi"][-1], hi)
            e["rows"][-1] += rows
            e["size"][-1] += len(mask)
            if not full.all():
                self._keep[file][at] = full
            return
        if rows < len(mask):
            self._keep[file][len(e["batch"])] = mask.copy()
        e["batch"].append(batch)
        e["offsets"].append(extent[0])
        e["ends"].append(extent[1])
        e["lo"].append(lo)
        e["hi"].append(hi)
        e["rows"].append(rows)
        e["size"].append(len(mask))

    def files(self, events: RankEvents) -> tuple[EventFile, ...]:
        """The index of each of the rank's files: the batches with valid rows."""
        return tuple(
            _event_file(stream, events.version, e, keep)
            for stream, e, keep in zip(events.streams, self._entries, self._keep, strict=False)
        )


def _event_file(
    stream: Stream, version: int, e: dict[str, list[Any]], keep: dict[int, np.ndarray]
) -> EventFile:
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


def per_batch(step: np.ndarray, ok: np.ndarray, starts: np.ndarray) -> list[tuple[int, int, int]]:
    """Per batch of a group (its rows from ``starts`` on): its valid rows, their smallest
    and largest step (:data:`NO_STEP` and -1 when none). Reduced for all batches at
    once: a batch's own sums and extremes cost more in calls than in work."""
    if not len(starts):
        return []
    if ok.all():
        rows = np.diff(np.r_[starts, len(step)])
        lo = np.minimum.reduceat(step, starts)
        hi = np.maximum.reduceat(step, starts)
    else:
        rows = np.add.reduceat(ok.astype(np.int64), starts)
        lo = np.minimum.reduceat(np.where(ok, step, NO_STEP), starts)
        hi = np.maximum.reduceat(np.where(ok, step, -1), starts)
    none = rows == 0
    if none.any():
        lo, hi = np.where(none, NO_STEP, lo), np.where(none, -1, hi)
    return list(zip(rows.tolist(), lo.tolist(), hi.tolist(), strict=True))


def rank_scan(
    events: RankEvents,
    built: BatchIndex,
    steps: tuple[pa.Table, Stream, Quarantine],
    warnings: list[str],
    index: TraceMeta,
    tails: list[np.ndarray] | None = None,
) -> RankScan:
    """A rank read to its end: its account made from what its events and steps held
    (``warnings``: what reading the steps said), its index, and the per-step tails."""
    st_kept, st_stream, st_bad = steps
    rank = events.rank
    meta = index.meta[rank]
    stem = index.path / schema.rank_stem(rank)
    said = [*events.warnings, *warnings]
    ev = (events.account, events.left_out())
    account = account_rank(rank, meta, stem, ev, (st_stream, st_bad), said)
    said.extend(rank_warnings(rank, meta, stem))
    step, enter, exit_ = _reduce_tails(tails or [])
    return RankScan(
        rank, built.files(events), st_kept, account, tuple(said), built.total, step, enter, exit_
    )


def scan_rank(
    index: TraceMeta, rank: int, rotated: dict[int, list[Path]] | None = None
) -> RankScan:
    """Read and validate rank ``rank``'s files to their end (see the module docstring).
    Raises :class:`~syncpace.errors.TraceError` where the loader would."""
    events = RankEvents(index, rank, rotated)
    built = BatchIndex(len(events.paths))
    tails: list[np.ndarray] = []
    for group in events.checked(CHECK_ROWS):
        step = column_numpy(group.table.column("step"), -1)
        sizes = np.array([p.rows.num_rows for p in group.pieces], dtype=np.int64)
        starts = np.r_[0, np.cumsum(sizes)[:-1]]
        counted = per_batch(step, group.mask, starts)
        for piece, at, size, count in zip(
            group.pieces, starts.tolist(), sizes.tolist(), counted, strict=True
        ):
            built.record(piece.file, piece.batch, piece.extent, group.mask[at : at + size], count)
        if group.kept.num_rows:
            tails.append(_tails(group.kept))
    warnings: list[str] = []
    steps = checked_steps(events.steps_path, index.meta[rank], rank, warnings)
    return rank_scan(events, built, steps, warnings, index, tails)


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
