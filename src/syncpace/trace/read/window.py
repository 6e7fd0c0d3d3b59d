"""Events of chosen steps read again from a rank's index: only the record batches
holding them, each in one read of its bytes.

:func:`read_window` reads the events of steps ``[lo, hi)`` of every rank from the
index :func:`~syncpace.trace.read.index.scan_rank` (or the sweep) built: the batches
that cover them, decoded message by message, in the current schema
(:func:`~syncpace.trace.read.rank.upgraded`), with the scan's quarantine applied. A
:class:`BatchCache` keeps the one batch per rank that reaches into the next window, so
a sequential reader decodes each batch once. :func:`read_steps` reads single steps
(the report's sampled iterations).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pyarrow as pa

from syncpace.errors import TraceError
from syncpace.trace import schema
from syncpace.trace.read.index import EventFile, RankScan
from syncpace.trace.read.rank import upgraded
from syncpace.trace.validate.files import MAX_STREAM_BYTES, open_regular
from syncpace.trace.validate.rows import column_numpy
from syncpace.trace.validate.stream import DAMAGE, first_line

_ONE_THREAD = pa.ipc.IpcReadOptions(use_threads=False)
_SCHEMA_MESSAGES: dict[pa.Schema, bytes] = {}


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
    columns: tuple[str, ...],
) -> pa.Table:
    """The valid events of steps ``[lo, hi)`` of every rank in ``scans`` (rank order,
    file order within a rank), with ``columns`` only."""
    out: list[pa.RecordBatch] = []
    held: dict[tuple[int, int, int], pa.RecordBatch] = {}
    for scan in scans:
        with _Opened(scan, columns) as files:
            for f, entry in scan.batches(lo, hi):
                ef = scan.files[f]
                key = (scan.rank, f, entry)
                batch = cache.get(key) if cache is not None else None
                if batch is None:
                    batch = files.decode(f, entry)
                if cache is not None and ef.hi[entry] >= hi:
                    held[key] = batch
                _select(batch, ef, entry, lo, hi, out)
    if cache is not None:
        cache.keep(held)
    return _joined(out, columns)


def read_steps(scans: list[RankScan], steps: list[int], *, columns: tuple[str, ...]) -> pa.Table:
    """The valid events of each of ``steps`` of every rank in ``scans``: rank by rank,
    the steps in the order given, file order within a step (what one
    :func:`read_window` of each rank and step gives, joined). A rank's files are opened
    once and a batch holding several of the steps decoded once."""
    out: list[pa.RecordBatch] = []
    for scan in scans:
        decoded: dict[tuple[int, int], pa.RecordBatch] = {}
        with _Opened(scan, columns) as files:
            for step in steps:
                for f, entry in scan.batches(step, step + 1):
                    batch = decoded.get((f, entry))
                    if batch is None:
                        batch = decoded[(f, entry)] = files.decode(f, entry)
                    _select(batch, scan.files[f], entry, step, step + 1, out)
    return _joined(out, columns)


class _Opened:
    """A rank's files, each opened for random access when a batch of it is first read,
    all closed at the end; a read that fails names the rank's file (it changed since
    the scan read it)."""

    def __init__(self, scan: RankScan, columns: tuple[str, ...]) -> None:
        self._scan, self._columns = scan, columns
        self._fds: dict[int, int] = {}

    def decode(self, f: int, entry: int) -> pa.RecordBatch:
        ef = self._scan.files[f]
        if f not in self._fds:
            self._fds[f] = _random_access(ef.path)
        return _decode(self._fds[f], ef, entry, self._columns)

    def __enter__(self) -> _Opened:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
        if isinstance(exc, DAMAGE):
            path = self._scan.files[0].path
            raise TraceError(path, f"changed since it was read ({first_line(exc)})") from exc


def _select(batch: pa.RecordBatch, ef: EventFile, entry: int, lo: int, hi: int, out: list) -> None:
    """Append to ``out`` the rows of ``batch`` (entry ``entry`` of ``ef``) the scan kept
    whose step is in ``[lo, hi)``."""
    # a null step (a row the scan left out) is in no window
    step = column_numpy(batch.column("step"), lo - 1)
    sel = (step >= lo) & (step < hi)
    if entry in ef.keep:
        sel &= ef.keep[entry]
    if sel.all():
        out.append(batch)
    elif sel.any():
        out.append(batch.filter(pa.array(sel)))


def _joined(batches: list[pa.RecordBatch], columns: tuple[str, ...]) -> pa.Table:
    target = pa.schema([schema.EVENTS.field(c) for c in columns])
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
    fd, _ = open_regular(path, MAX_STREAM_BYTES, "data file")
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
    batch = upgraded(batch, ef.version).select(list(columns))
    target = pa.schema([schema.EVENTS.field(c) for c in columns])
    return batch.cast(target) if batch.schema != target else batch


def _schema_message(arrow_schema: pa.Schema) -> bytes:
    found = _SCHEMA_MESSAGES.get(arrow_schema)
    if found is None:
        found = _SCHEMA_MESSAGES[arrow_schema] = arrow_schema.serialize().to_pybytes()
    return found
