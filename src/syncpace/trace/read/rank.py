"""One rank's files read forward, record batch by record batch: the one loop over events
files that every reader runs (the loader, the streaming scan and sweep, the Perfetto
export).

:class:`RankEvents` opens a rank's events files in order (its rotated segments after
the first), and for each batch checks what the file vouches for — the schema its
version wrote, Arrow's structural validation, the CRC-32 the writer put beside every
batch (:class:`~syncpace.trace.validate.stream.Stream`) — and hands it on in the current
schema (:func:`upgraded`, the version upgrade of every reader). :meth:`RankEvents.checked`
applies the row rules (:func:`~syncpace.trace.validate.rows.check_events`) and the
duplicate rule (:class:`~syncpace.trace.read.seen.Seen`) to groups of those batches;
the sweep, which validates many ranks' rows together, takes the batches unchecked and
counts what it leaves out in the same :attr:`RankEvents.bad`. Either way what the
rank's account needs (:attr:`RankEvents.account`, :attr:`RankEvents.warnings` and
:meth:`RankEvents.left_out`) is made here, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from syncpace.errors import TraceError
from syncpace.trace import schema
from syncpace.trace.read.meta import TraceMeta, rank_files
from syncpace.trace.read.seen import Seen
from syncpace.trace.validate.checksums import unvouched_warning
from syncpace.trace.validate.rows import Quarantine, check_events, check_step_order, check_steps
from syncpace.trace.validate.stream import DAMAGE, Stream, first_line

#: Rows validated together (the rules cost per call, not per row: batch them up).
CHECK_ROWS = 1 << 16
_MISSING = "missing (the rank's metadata exists, its data file does not)"
_CHECKSUM = "in batches failing their checksum"


def upgraded(batch: pa.RecordBatch, version: int) -> pa.RecordBatch:
    """An events batch of the schema ``version`` wrote, in the current schema (the
    columns it lacks filled as :func:`~syncpace.trace.schema.upgrade_events` says)."""
    if version == schema.SCHEMA_VERSION:
        return batch
    table = schema.upgrade_events(pa.Table.from_batches([batch]), version)
    return table.select(schema.EVENTS.names).combine_chunks().to_batches()[0]


@dataclass(frozen=True)
class Piece:
    """A slice of one record batch of a rank's events, in the current schema."""

    file: int  # which of the rank's files (:attr:`RankEvents.paths`)
    batch: int  # the batch's number in that file, from 0
    extent: tuple[int, int]  # where the batch's message starts and ends in the file
    rows: pa.RecordBatch


@dataclass(frozen=True)
class Checked:
    """A group of pieces with the rules applied: ``mask`` says, per row of ``table``
    (the pieces' rows joined), whether it was kept; ``kept`` holds those rows."""

    pieces: list[Piece]
    table: pa.Table
    mask: np.ndarray
    kept: pa.Table


@dataclass
class Segments:
    """The segments of one rank's rotated events, read as one stream: what the account
    needs of a :class:`~syncpace.trace.validate.stream.Stream`, batches named by file."""

    path: Path
    rows: int = 0
    cut: str | None = None
    has_eos: bool = True
    corrupt_rows: int = 0
    corrupt_batches: list[Any] = field(default_factory=list)
    unvouched_rows: int = 0
    unvouched_batches: list[Any] = field(default_factory=list)
    journal_hi: int = 1

    def add(self, stream: Stream, last: bool) -> None:
        self.rows += stream.rows
        self.corrupt_rows += stream.corrupt_rows
        self.corrupt_batches += [f"{stream.path.name}:{b}" for b in stream.corrupt_batches]
        self.unvouched_rows += stream.unvouched_rows
        self.unvouched_batches += [f"{stream.path.name}:{b}" for b in stream.unvouched_batches]
        self.journal_hi = max(self.journal_hi, stream.journal_hi)
        if last:
            self.cut, self.has_eos = stream.cut, stream.has_eos

    def unvouched(self, what: str) -> str | None:
        if not self.unvouched_batches:
            return None
        return unvouched_warning(self.path, self.unvouched_batches, self.unvouched_rows, what)


class RankEvents:
    """One rank's events files, read forward once (see the module docstring).

    ``mapped``: memory-map each file (zero-copy, for loading it whole); otherwise read
    it message by message, with the kernel asked to fetch ``prefetch`` bytes ahead
    (bounded memory, for many ranks read at once). The first file is opened (and its
    schema checked) here; each later one when the reading reaches it."""

    def __init__(
        self,
        index: TraceMeta,
        rank: int,
        rotated: dict[int, list[Path]] | None = None,
        *,
        mapped: bool = True,
        prefetch: int = 0,
    ) -> None:
        self.rank = rank
        self.world_size = index.world_size
        meta = index.meta[rank]
        paths, self.steps_path = rank_files(index, rank, rotated)
        self.paths = paths or [index.stream_paths(rank)[0]]
        for path in self.paths:
            if not path.exists() and not path.is_symlink():
                raise TraceError(path, _MISSING)
        self.version: int = meta["schema_version"]
        self.expected = schema.events_schema(self.version)
        self._mapped, self._prefetch = mapped, prefetch
        #: The rows left out so far, by the first rule each broke.
        self.bad = Quarantine()
        #: The calls seen so far (the duplicate rule).
        self.seen = Seen()
        #: Cut streams and closed segments without their end marker, as they are met.
        self.warnings: list[str] = []
        #: The files opened so far, in order.
        self.streams = [self._open(self.paths[0])]
        self._joined: Segments | None = None
        if len(self.paths) > 1 or meta.get("segments"):
            first = index.stream_paths(rank)[0]
            self._joined = Segments(first.with_name(f"{schema.rank_stem(rank)}.events.*.arrow"))

    def _open(self, path: Path) -> Stream:
        return Stream(path, self.expected, mapped=self._mapped, prefetch=self._prefetch)

    @property
    def path(self) -> Path:
        """The file being read (the last one once all are)."""
        return self.streams[-1].path

    @property
    def account(self) -> Stream | Segments:
        """What the files held, read to their end: the stream of a rank's one file, or
        its segments read as one."""
        return self._joined or self.streams[0]

    def pieces(self) -> Iterator[Piece]:
        """Every complete, intact batch of every file, in order, in slices of at most
        :data:`~syncpace.trace.validate.stream.SLICE_ROWS` rows, in the current schema."""
        for f, path in enumerate(self.paths):
            if f == len(self.streams):
                self.streams.append(self._open(path))
            stream = self.streams[f]
            try:
                for rows in stream.batches():
                    extent = (stream.offset, stream.end)
                    # handed over, not kept in this frame while it waits: a reader of
                    # thousands of ranks would otherwise hold a decoded batch of each
                    held = [Piece(f, stream.batch, extent, upgraded(rows, self.version))]
                    del rows
                    yield held.pop()
            except DAMAGE as exc:
                raise TraceError(path, f"unreadable columns ({first_line(exc)})") from exc
            self._ended(f, stream)

    def left_out(self) -> Quarantine:
        """What was left out of the files read to their end: :attr:`bad`, and the rows
        of batches failing their checksum."""
        out = Quarantine(dict(self.bad.reasons))
        corrupt = self.account.corrupt_rows
        if corrupt:
            out.reasons[_CHECKSUM] = out.reasons.get(_CHECKSUM, 0) + corrupt
        return out

    def _ended(self, f: int, stream: Stream) -> None:
        if stream.cut:
            self.warnings.append(f"{stream.path}: {stream.cut}")
        last = f == len(self.paths) - 1
        if self._joined is not None:
            self._joined.add(stream, last)
            if not last and not stream.has_eos and not stream.cut:
                self.warnings.append(
                    f"{stream.path}: a closed segment ends without its end-of-stream marker"
                )

    def checked(self, rows: int = CHECK_ROWS, *, duplicates: bool = True) -> Iterator[Checked]:
        """The pieces in groups of at least ``rows`` rows (the last may hold fewer),
        each with the row rules applied and, with ``duplicates``, the calls seen
        before left out; what is left out is counted in :attr:`bad`."""
        pending: list[Piece] = []
        held = 0
        for piece in self.pieces():
            pending.append(piece)
            held += piece.rows.num_rows
            if held >= rows:
                yield self._check(pending, duplicates)
                pending, held = [], 0
        if pending:
            yield self._check(pending, duplicates)

    def _check(self, pieces: list[Piece], duplicates: bool) -> Checked:
        table = pa.Table.from_batches([p.rows for p in pieces], schema=schema.EVENTS)
        n = table.num_rows
        numbered = table.append_column("__row", pa.array(np.arange(n, dtype=np.int64)))
        try:
            kept, bad = check_events(numbered, self.rank, self.world_size)
        except DAMAGE as exc:
            path = self.paths[pieces[-1].file]
            raise TraceError(path, f"unreadable columns ({first_line(exc)})") from exc
        self.bad.add(bad)
        if kept.num_rows == n:
            mask = np.ones(n, dtype=bool)
        else:
            mask = np.zeros(n, dtype=bool)
            mask[kept.column("__row").to_numpy()] = True
        if duplicates:
            first = self.seen.first(kept)
            if not first.all():
                dropped = int((~first).sum())
                self.bad.reasons["duplicate call"] = (
                    self.bad.reasons.get("duplicate call", 0) + dropped
                )
                mask[kept.column("__row").to_numpy()[~first]] = False
                kept = kept.filter(pa.array(first))
        return Checked(pieces, table, mask, kept.drop_columns(["__row"]))


def read_stream(path: Path, expected: pa.Schema, warnings: list[str]) -> tuple[pa.Table, Stream]:
    """A whole Arrow IPC stream (steps, counters), memory-mapped, every complete batch
    of a cut-short file kept and the cut said in ``warnings``."""
    if not path.exists() and not path.is_symlink():
        raise TraceError(path, _MISSING)
    stream = Stream(path, expected)
    try:
        table = stream.read_all()
    except DAMAGE as exc:
        raise TraceError(path, f"unreadable columns ({first_line(exc)})") from exc
    if stream.cut:
        warnings.append(f"{path}: {stream.cut}")
    return table, stream


def read_steps_file(
    path: Path, meta: dict[str, Any], warnings: list[str]
) -> tuple[pa.Table, Stream]:
    """A rank's steps file, in the current schema whatever version wrote it."""
    version = meta["schema_version"]
    table, stream = read_stream(path, schema.steps_schema(version), warnings)
    if version != schema.SCHEMA_VERSION:
        table = schema.upgrade_steps(table, version)
    return table, stream


def checked_steps(
    path: Path, meta: dict[str, Any], rank: int, warnings: list[str]
) -> tuple[pa.Table, Stream, Quarantine]:
    """A rank's steps file read whole, the rows that break a rule (or the order of
    steps) left out: the steps kept, the stream read, and what was left out."""
    table, stream = read_steps_file(path, meta, warnings)
    kept, bad = check_steps(table, rank)
    if stream.corrupt_rows:
        bad.reasons[_CHECKSUM] = stream.corrupt_rows
    kept, order = check_step_order(kept)
    bad.add(order)
    return kept, stream, bad
