"""Every rank's events read once, in lockstep, a window of steps at a time: the
streaming analysis' one pass (docs/streaming.md).

Each rank's files are read forward by its :class:`~syncpace.trace.read.rank.RankEvents`
(read, not mapped, the kernel's read-ahead replaced by a share of
:data:`PREFETCH_BYTES`); the rows of many ranks are validated together, which the
one-rank loop cannot do (:meth:`Sweep._validated`: the rules cost per call, and at
thousands of ranks a window holds a few rows of each), and what is left out is counted
in each rank's own account. Each rank's index is built as its batches are read
(:class:`~syncpace.trace.read.index.BatchIndex`), so single steps can be read again.
Its held rows and their encoding live in :mod:`~syncpace.trace.read.held` and
:mod:`~syncpace.trace.read.encoding`.
"""

from __future__ import annotations

import resource
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from syncpace.errors import TraceError
from syncpace.trace import schema
from syncpace.trace.read.encoding import compact, contiguous, one_call, string_columns
from syncpace.trace.read.held import Held, window_table
from syncpace.trace.read.index import BatchIndex, RankScan, per_batch, rank_scan
from syncpace.trace.read.meta import TraceMeta, segment_files
from syncpace.trace.read.rank import RankEvents, checked_steps
from syncpace.trace.validate.rows import Quarantine, check_events, column_numpy, events_valid
from syncpace.trace.validate.stream import DAMAGE, Stream, first_line

#: Rows of many ranks validated together by a :class:`Sweep`.
GROUP_ROWS = 1 << 18
#: Bytes a :class:`Sweep` has the kernel read ahead of it in all ranks' files at most,
#: shared among them (``Stream``'s ``prefetch``), each file's share within
#: :data:`PREFETCH_RANGE`: at 4,096 ranks a window reads a few kilobytes of each file.
PREFETCH_BYTES = 1 << 30
PREFETCH_RANGE = (1 << 17, 1 << 23)
#: The widest window, and the furthest first window's end: within numpy's int64,
#: whatever span of steps a damaged steps file claims.
_WIDEST = 1 << 62


class CannotSweep(Exception):
    """A run :class:`Sweep` does not read: :func:`~syncpace.trace.read.index.scan_rank`
    and :func:`~syncpace.trace.read.window.read_window` read it instead (two passes)."""


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


class _Cursor:
    """One rank's event files, read forward one record batch at a time, and the index
    of its batches as they are read."""

    def __init__(
        self, index: TraceMeta, rank: int, rotated: dict[int, list[Path]], prefetch: int = 0
    ) -> None:
        self.rank = rank
        # Read, not mapped: a mapped file's pages count as this process's memory, and
        # thousands of ranks' files are open at once. One file of a rank open at a time.
        self.events = RankEvents(index, rank, rotated, mapped=False, prefetch=prefetch)
        self.steps_path = self.events.steps_path
        self.paths = self.events.paths
        self._pieces = self.events.pieces()
        self.done = False
        self.reached = -1  # the largest step in the batches read so far
        #: The index of the files, as :func:`scan_rank` builds it (for re-reading a step).
        self.index = BatchIndex(len(self.paths))

    @property
    def path(self) -> Path:
        return self.events.path

    def read_until(self, hi: int) -> list[tuple[int, int, tuple[int, int], pa.RecordBatch]]:
        """The next batches, up to the first one holding a step at or after ``hi`` (none
        when one read before does; all at the end): (file, batch number, extent, batch),
        the extent where the batch's message starts and ends in the file."""
        out: list[tuple[int, int, tuple[int, int], pa.RecordBatch]] = []
        while not self.done and self.reached < hi:
            piece = next(self._pieces, None)
            if piece is None:
                self.done = True
                break
            out.append((piece.file, piece.batch, piece.extent, piece.rows))
            top = _largest(piece.rows.column("step"))
            if top is not None:
                self.reached = max(self.reached, top)
        return out


#: A batch a cursor read: (cursor, file, batch number, extent in the file, batch).
_Read = tuple[_Cursor, int, int, tuple[int, int], pa.RecordBatch]


class Sweep:
    """Every rank's events read once, in lockstep, a window of steps at a time.

    Each window reads, for every rank, the record batches up to the first that reaches
    past the window (the rest of it is held for the next window: one batch per rank),
    validates the new rows of all ranks together (:func:`events_valid`; a rank
    whose rows break a rule is then checked alone for the reasons), drops the calls
    seen before (per rank, :class:`~syncpace.trace.read.seen.Seen`), and yields the
    window's valid events in rank order, file order within a rank — what
    :func:`~syncpace.trace.read.window.read_window` returns for it, but with the names
    dictionary-encoded. Each rank's account is made when its files end (:meth:`scans`),
    with the index :func:`~syncpace.trace.read.index.scan_rank` builds, so single steps
    can be read again (the report's samples).

    A row of a step before the current window (steps written out of order) raises
    :class:`OutOfOrder`."""

    def __init__(
        self,
        index: TraceMeta,
        *,
        columns: tuple[str, ...],
        warmup_steps: int,
        window_events: int,
    ) -> None:
        """``columns``: the event columns the windows hold (the rules read them all)."""
        self.index = index
        self._columns = columns
        self._schema = pa.schema([schema.EVENTS.field(c) for c in columns])
        self._strings = string_columns(columns)
        if not _open_files_for(len(index.ranks)):
            raise CannotSweep("too few open files allowed for one per rank")
        rotated = segment_files(index.path)
        low, high = PREFETCH_RANGE
        prefetch = min(max(PREFETCH_BYTES // (2 * max(len(index.ranks), 1)), low), high)
        self.cursors: list[_Cursor] = []
        self._steps: list[tuple[pa.Table, Stream, Quarantine, list[str]]] = []
        for rank in index.ranks:  # the files of every rank opened (and checked) first
            cursor = _Cursor(index, rank, rotated, prefetch)
            warnings: list[str] = []
            st_kept, st_stream, st_bad = checked_steps(
                cursor.steps_path, index.meta[rank], rank, warnings
            )
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
        self._pending: list[Held] = []
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
            return self._schema.empty_table()
        return window_table(pieces)

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
        self._pending.append(Held.of(table, self._window_of(step), int(step.max())))

    def _validated(self, new: list[_Read]) -> pa.Table:
        """The valid rows of the batches just read (every rule of the loader), indexed."""
        if not new:
            return self._schema.empty_table()
        sizes = np.array([item[4].num_rows for item in new], dtype=np.int64)
        # One copy into contiguous columns: every kernel after it runs once, not per batch.
        batches = [item[4] for item in new]
        raw = contiguous(pa.Table.from_batches(batches, schema=schema.EVENTS), self._columns)
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
        analysis = compact(raw.select(list(self._columns)), self._strings)
        checked = raw
        for name in self._strings:
            at_column = raw.schema.get_field_index(name)
            checked = checked.set_column(at_column, name, analysis.column(name))
        try:
            ok = events_valid(checked, rank, self.index.world_size)
        except DAMAGE:
            ok = None
        for c, a, b in zip(cursors, bounds[:-1], bounds[1:], strict=True):
            if ok is None or not ok[a:b].all():  # this rank alone: the loader's reasons
                sub = raw.slice(a, b - a)
                sub = sub.append_column("__row", pa.array(np.arange(b - a, dtype=np.int64)))
                try:
                    kept, bad = check_events(sub, c.rank, self.index.world_size)
                except DAMAGE as exc:
                    raise TraceError(c.path, f"unreadable columns ({first_line(exc)})") from exc
                c.events.bad.add(bad)
                if ok is None:
                    ok = np.ones(len(rank), dtype=bool)
                mask = np.zeros(b - a, dtype=bool)
                mask[kept.column("__row").to_numpy()] = True
                ok[a:b] = mask
        assert ok is not None
        self._first_calls(raw, analysis, ok, cursors, bounds)
        starts_of = np.r_[0, np.cumsum(sizes)[:-1]]
        counted = per_batch(column_numpy(raw.column("step"), -1), ok, starts_of)
        for (c, file, batch, extent, _), at, size, count in zip(
            new, starts_of.tolist(), sizes.tolist(), counted, strict=True
        ):
            c.index.record(file, batch, extent, ok[at : at + size], count)
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
        key = one_call(analysis, ok)
        seq = column_numpy(raw.column("seq"), -1)
        # the usual group: every row valid, one kind of call: the runs' numbers checked
        # together, each rank then only told where its run starts and ends
        runs = counting_runs(seq, bounds) if key is not None and ok.all() else None
        step_ok = np.flatnonzero(ok) if runs is None else None
        counting, firsts, lasts = runs if runs is not None else ([], [], [])
        for i, (c, a, b) in enumerate(zip(cursors, bounds[:-1], bounds[1:], strict=True)):
            rows = None
            if step_ok is None:
                if counting[i] and c.events.seen.extend(key, firsts[i], lasts[i]):
                    continue
            else:
                rows = step_ok[(step_ok >= a) & (step_ok < b)] if not ok[a:b].all() else None
                s = seq[a:b] if rows is None else seq[rows]
                if not len(s):
                    continue
                if key is not None:
                    if (len(s) < 2 or bool(np.all(np.diff(s) == 1))) and c.events.seen.extend(
                        key, int(s[0]), int(s[-1])
                    ):
                        continue
            sub = raw.slice(a, b - a)
            if rows is not None:
                sub = sub.filter(pa.array(ok[a:b]))
            first = c.events.seen.first(sub)
            if not first.all():
                reasons = c.events.bad.reasons
                reasons["duplicate call"] = reasons.get("duplicate call", 0) + int((~first).sum())
                where = np.arange(a, b) if rows is None else rows
                ok[where[~first]] = False

    def scans(self) -> list[RankScan]:
        """Every rank's scan (call after the last window)."""
        return [
            rank_scan(cursor.events, cursor.index, (kept, stream, bad), warnings, self.index)
            for cursor, (kept, stream, bad, warnings) in zip(self.cursors, self._steps, strict=True)
        ]

    @property
    def plan_first(self) -> int:
        """The first step analysed, as :func:`~syncpace.analysis.streaming.plan` has it."""
        return self.cut or 0

    def steps_tables(self) -> list[pa.Table]:
        return [t for t, *_ in self._steps]


def counting_runs(
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
    if isinstance(declared, int) and declared >= 0 and cursor.events.streams[0].has_eos:
        return declared
    size = 0
    for path in cursor.paths:
        try:
            size += path.stat().st_size
        except OSError:  # pragma: no cover - removed while open
            pass
    return size // 40
