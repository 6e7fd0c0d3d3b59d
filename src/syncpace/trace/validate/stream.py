"""One Arrow IPC stream file, validated as it is read: the schema as a whole, every
batch's checksum, and where a damaged batch cut the stream short.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from syncpace.errors import TraceError
from syncpace.trace import schema
from syncpace.trace.validate.checksums import unvouched_warning
from syncpace.trace.validate.files import MAX_STREAM_BYTES, open_regular

#: Rows decoded at a time by the streaming readers (a producer may write one batch).
SLICE_ROWS = 1 << 16

#: What a damaged Arrow file can raise while being decoded.
DAMAGE = (pa.ArrowException, UnicodeDecodeError, ValueError, OSError, KeyError, IndexError)

_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)

#: The Arrow IPC end-of-stream marker: continuation token, zero length.
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


#: Where the open descriptors are files (Linux, macOS, the BSDs).
_FD_DIR = Path("/dev/fd")


class Stream:
    """One Arrow IPC stream file, validated, read batch by batch (memory-mapped).

    After iteration, :attr:`rows` counts the rows of the complete batches read and
    :attr:`cut` says why the stream ended early (``None`` when it ended cleanly)."""

    def __init__(
        self, path: Path, expected: pa.Schema, *, mapped: bool = True, prefetch: int = 0
    ) -> None:
        """``mapped``: memory-map the file (zero-copy tables, for loading it whole);
        otherwise read it message by message (bounded memory, for streaming).
        ``prefetch``: read message by message with the kernel asked to fetch this many
        bytes ahead of the reader, and no more (:meth:`_fetch_ahead`)."""
        self.path = path
        self.expected = expected
        self.rows = 0
        self.cut: str | None = None
        #: Rows of complete batches whose checksum did not match (left out), and where.
        self.corrupt_rows = 0
        self.corrupt_batches: list[int] = []
        #: Rows of batches with rows but no checksum (kept), and where: the writer
        #: checksums every such batch, so they were written by something else.
        self.unvouched_rows = 0
        self.unvouched_batches: list[int | str] = []
        #: The record batch the last slice came from (its number in the stream, from 0).
        self.batch = -1
        #: Byte offsets of that batch's message in the file: where it starts and ends.
        self.offset = -1
        self.end = -1
        #: The highest ``journal_hi`` of the intact batches (1 when none carries one):
        #: a dead rank's crash journal holds what the stream lacks from there on.
        self.journal_hi = 1
        self._file: pa.NativeFile | None = None
        fd, size = open_regular(path, MAX_STREAM_BYTES, "data file")
        try:
            if size == 0:
                raise TraceError(path, "empty file: no Arrow stream header was written")
            #: Whether the file ends with the end-of-stream marker a closing writer writes.
            self.has_eos = size >= len(_EOS) and os.pread(fd, len(_EOS), size - len(_EOS)) == _EOS
            if mapped:
                try:
                    mapped_file = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
                except (OSError, ValueError) as exc:
                    raise TraceError(path, f"cannot map the data file: {exc}") from exc
                source: Any = pa.BufferReader(pa.py_buffer(mapped_file))
            else:
                self._file = source = _reopened(fd, path)
        finally:
            os.close(fd)
        self._prefetch = prefetch if self._file is not None else 0
        self._fetched = 0
        if self._prefetch:  # the kernel's own read-ahead off: the schema is read next
            self._advise(0, 0, os.POSIX_FADV_RANDOM)
        self._source = source
        try:
            # One thread: a batch's columns are too small to be worth a thread pool's
            # dispatch (it doubles the cost of decoding a flush-sized batch).
            self._reader = pa.ipc.open_stream(source, options=_READ_OPTIONS)
            got = self._reader.schema
            got.names  # noqa: B018 - decoding the names is what fails on damaged ones
            check_schema(path, got, expected)
        except DAMAGE as exc:
            self.close()
            raise TraceError(path, f"not an Arrow IPC stream ({first_line(exc)})") from exc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every complete batch, in the expected column order and types, in slices of
        at most :data:`SLICE_ROWS` rows. A damaged batch ends the stream (:attr:`cut`)."""
        names = self.expected.names
        index = -1
        try:
            while True:
                index += 1
                try:
                    at = self._source.tell()
                    if self._prefetch and at + self._prefetch > self._fetched:
                        self._fetch_ahead(at)
                    batch, custom = self._reader.read_next_batch_with_custom_metadata()
                    end = self._source.tell()
                    # Decoding trusts the metadata's lengths: checking the buffers' sizes
                    # against them turns a damaged batch into an exception here, not a
                    # crash later (and the checksum only reads whole buffers).
                    batch.validate()
                    written = (custom or {}).get(schema.CHECKSUM_KEY.encode())
                    if written is None:
                        # nothing vouches for the values: the offsets inside the buffers
                        # and the strings' UTF-8 are checked one by one
                        batch.validate(full=True)
                        intact = True
                    else:  # a match: the writer's buffers, which the writer built valid
                        intact = written.decode() == schema.decoded_checksum(batch)
                    if not batch.schema.equals(self.expected, check_metadata=True):
                        if batch.schema.equals(self.expected):
                            # The same columns; the metadata is the file's, which the
                            # checksum does not cover: a damaged byte there is not
                            # UTF-8, and polars panics importing it. The format's own
                            # is handed on.
                            batch = pa.RecordBatch.from_arrays(batch.columns, schema=self.expected)
                        else:
                            batch = batch.select(names).cast(self.expected)
                except StopIteration:
                    return
                except DAMAGE as exc:
                    self.cut = f"cut short after {self.rows:,} rows ({first_line(exc)})"
                    return
                self.rows += batch.num_rows
                if written is None and batch.num_rows:
                    self.unvouched_rows += batch.num_rows
                    self.unvouched_batches.append(index)
                if not intact:
                    self.corrupt_rows += batch.num_rows
                    self.corrupt_batches.append(index)
                    continue
                self.batch = index
                self.offset, self.end = at, end
                hi = (custom or {}).get(schema.JOURNAL_HI_KEY.encode())
                if hi is not None and hi.isdigit():
                    self.journal_hi = max(self.journal_hi, int(hi))
                if not batch.num_rows:
                    continue
                if batch.num_rows <= SLICE_ROWS:
                    # handed over, not kept in this frame while it waits: a reader of many
                    # streams at once would otherwise hold one decoded batch of each
                    held, batch = [batch], None
                    yield held.pop()
                    continue
                for start in range(0, batch.num_rows, SLICE_ROWS):
                    yield batch.slice(start, SLICE_ROWS)
        finally:
            self.close()

    def _fetch_ahead(self, at: int) -> None:
        """Ask the kernel to read the file up to ``2 * prefetch`` bytes past ``at`` (so it
        stays ahead until the reader is ``prefetch`` from that end), its own read-ahead
        switched off at the start. Read in lockstep, thousands of files each get the
        kernel's read-ahead, megabytes each (8 MiB on the disks measured here): more
        than a memory-limited container's page cache holds, so pages fetched ahead are
        dropped before they are read, and read again."""
        end = at + 2 * self._prefetch
        self._advise(self._fetched, end - self._fetched, os.POSIX_FADV_WILLNEED)
        self._fetched = end

    def _advise(self, offset: int, length: int, advice: int) -> None:
        """``posix_fadvise`` on the file; a failure (no such call here, or refused) ends
        the prefetching and leaves the kernel's own read-ahead."""
        try:
            os.posix_fadvise(self._file.fileno(), offset, length, advice)  # type: ignore[union-attr]
        except (OSError, ValueError, AttributeError):
            self._prefetch = 0

    def unvouched(self, what: str) -> str | None:
        """The warning for batches no checksum vouches for (None when there are none).
        Their values are still checked against the format's rules, one by one."""
        if not self.unvouched_batches:
            return None
        return unvouched_warning(self.path, self.unvouched_batches, self.unvouched_rows, what)

    def read_all(self) -> pa.Table:
        batches = list(self.batches())
        if not batches:
            return self.expected.empty_table()
        return pa.Table.from_batches(batches, schema=self.expected)


def _reopened(fd: int, path: Path) -> pa.NativeFile:
    """Arrow's own file over the descriptor ``open_regular`` checked (not the path, which
    may have been replaced since by something that blocks on open). Read natively: a
    file object in Python costs a call per message part, a tenth of a flush-sized
    batch's decoding. A damaged length in a message gets Arrow's own error, which
    compares it with what the file holds before allocating anything."""
    try:
        return pa.OSFile(f"/dev/fd/{fd}" if _FD_DIR.is_dir() else str(path))
    except OSError as exc:
        raise TraceError(path, f"cannot open the data file: {first_line(exc)}") from exc


def check_schema(path: Path, got: pa.Schema, expected: pa.Schema) -> None:
    names = got.names
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise TraceError(path, f"duplicate columns: {', '.join(map(repr, duplicated))}")
    missing = [f.name for f in expected if f.name not in names]
    if missing:
        raise TraceError(path, f"columns missing: {', '.join(missing)}")
    for f in expected:
        if not got.field(f.name).type.equals(f.type):
            raise TraceError(path, f"column {f.name!r} is {got.field(f.name).type}, not {f.type}")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
