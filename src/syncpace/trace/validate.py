"""One validation layer for everything read from a run directory.

Three levels, each with one rule for what happens to damage:

* **Files.** Only regular files are opened, without blocking (a FIFO or a device in
  place of a trace file is refused, never read), and within a size bound
  (:data:`MAX_META_BYTES`, :data:`MAX_STREAM_BYTES`).
* **Metadata** (``rank-R.meta.json``) is decoded strictly: RFC 8259 JSON (no ``NaN``,
  no invalid UTF-8 or lone surrogates), then converted to typed, versioned structs
  (:class:`RankMeta`). Wrong types, values out of range and unknown versions are a
  :class:`~syncpace.errors.TraceError`: one line naming the file, the key and the
  problem. Keys this version does not know are kept and ignored.
* **Columns** of the Arrow streams: the schema is checked as a whole (duplicate or
  missing columns, wrong types refuse the file); then every row is checked against
  the format's invariants (:func:`check_events`, :func:`check_steps`). Rows that break
  one are *quarantined*: left out of the tables and counted per reason, so analysis
  never works on them and the loss is reported, never silent.

What a file declares is checked against what it holds: a finished rank's
``events_written`` / ``steps_written`` against the rows found, and its streams'
end-of-stream marker. :class:`RankCompleteness` carries the account of every rank:
declared, found, quarantined, dropped (buffer full), cut.
"""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from syncpace.errors import TraceError
from syncpace.trace import schema

#: Bound on a metadata file: a real one is kilobytes (clock samples are capped).
MAX_META_BYTES = 64 << 20
#: Bound on one Arrow stream file (they are memory-mapped, never read whole).
MAX_STREAM_BYTES = 1 << 40
#: Sanity bound: larger values are damage, not clusters.
MAX_WORLD_SIZE = 1 << 20
#: Latest plausible timestamp (about the year 2116 as Unix-epoch nanoseconds); above it,
#: a value is damage (int64-max and its neighbours).
MAX_TIME_NS = 1 << 62
#: Longest plausible call or iteration: a week. A longer one is damage, not a timeout.
MAX_SPAN_NS = 7 * 24 * 3600 * 10**9
#: Rows decoded at a time by the streaming readers (a producer may write one batch).
SLICE_ROWS = 1 << 16

#: What a damaged Arrow file can raise while being decoded.
DAMAGE = (pa.ArrowException, UnicodeDecodeError, ValueError, OSError, KeyError, IndexError)

_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)

#: The Arrow IPC end-of-stream marker: continuation token, zero length.
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"

_I64 = 2**63 - 1
NonNeg = Annotated[int, msgspec.Meta(ge=0, le=_I64)]
Int64 = Annotated[int, msgspec.Meta(ge=-_I64 - 1, le=_I64)]
Text = Annotated[str, msgspec.Meta(max_length=4096)]


# Metadata ----------------------------------------------------------------------------
class ClockSample(msgspec.Struct):
    local_ns: Int64
    offset_ns: Int64
    uncertainty_ns: NonNeg
    rtt_ns: NonNeg


class Clock(msgspec.Struct):
    offset_ns: Int64 | None = None
    uncertainty_ns: NonNeg | None = None
    samples: list[ClockSample] = []
    error: str | None = None


class Group(msgspec.Struct):
    ranks: list[NonNeg]
    backend: str | None = None
    desc: Text | None = None  # torch's group description: "default_pg", "mesh_tp"
    mesh_dims: list[Text] = []  # the DeviceMesh dimensions the group serves


class JournalSizes(msgspec.Struct):
    slots: NonNeg
    inflight_slots: NonNeg


class Pacing(msgspec.Struct):
    """The keys of the pacer's account that the summary reads."""

    policy: str | None = None
    delay_max_s: Annotated[float, msgspec.Meta(ge=0)] | None = None
    policy_config: dict[str, Any] | None = None
    controller_config: dict[str, Any] | None = None
    ab: dict[str, Any] | None = None
    ab_state: str | None = None
    enabled: bool | None = None
    error: str | None = None


class Segments(msgspec.Struct):
    """What rotation removed from a rank's events (always-on mode)."""

    segment_s: float
    keep_s: float
    budget_bytes: NonNeg
    written: NonNeg
    removed: NonNeg
    removed_events: NonNeg
    removed_bytes: NonNeg
    removed_steps: list[tuple[Int64, Int64]] = []
    pins: list[dict[str, Any]] = []


class RankMeta(msgspec.Struct):
    """``rank-R.meta.json``, versions 1 and 2 (they share the metadata)."""

    schema: str
    schema_version: int
    rank: Annotated[int, msgspec.Meta(ge=0, lt=MAX_WORLD_SIZE)]
    world_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_WORLD_SIZE)]
    host: Text
    finished: bool = False
    events_written: NonNeg | None = None
    steps_written: NonNeg | None = None
    dropped_events: NonNeg = 0
    write_error: str | None = None
    local_rank: NonNeg | None = None
    node_rank: NonNeg | None = None
    local_world_size: NonNeg | None = None
    pid: Int64 | None = None
    device: Text | None = None
    backend: Text | None = None
    source: Text = "unknown"
    tool_version: Text | None = None
    started_ns: Int64 | None = None
    clock: Clock | None = None
    groups: dict[str, Group] | None = None
    topology: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    pacing: Pacing | None = None
    job_id: Text | None = None  # the same on every rank of one job (trace/merge.py)
    job_id_source: Text | None = None
    launcher: dict[str, Text] | None = None
    journal: JournalSizes | None = None
    journal_overflow: NonNeg = 0
    closed_by: Text | None = None
    segments: Segments | None = None
    summaries_written: NonNeg | None = None


_DECODER = msgspec.json.Decoder()


def read_meta(path: Path) -> dict[str, Any]:
    """The validated metadata of one rank, as the plain dict it was written as."""
    data = read_regular(path, MAX_META_BYTES, "metadata file")
    if not data.strip():
        raise TraceError(path, "empty metadata file")
    try:
        meta = _DECODER.decode(data)
    except msgspec.ValidationError as exc:  # a number no 64-bit type holds
        raise TraceError(path, f"not usable JSON ({_msgspec_reason(exc)})") from exc
    except msgspec.DecodeError as exc:
        raise TraceError(path, f"not valid JSON ({_msgspec_reason(exc)})") from exc
    except RecursionError as exc:
        raise TraceError(path, "not usable JSON (nested too deeply)") from exc
    if not isinstance(meta, dict):
        raise TraceError(path, "metadata is not a JSON object")
    if meta.get("schema") != schema.SCHEMA_NAME:
        raise TraceError(path, f"not a syncpace trace (schema is {_short(meta.get('schema'))})")
    version = meta.get("schema_version")
    if version not in schema.READABLE_VERSIONS or isinstance(version, bool):
        readable = ", ".join(str(v) for v in schema.READABLE_VERSIONS)
        raise TraceError(
            path,
            f"trace schema version {_short(version)} is not supported "
            f"(this syncpace reads versions {readable})",
        )
    for key in schema.REQUIRED_META_KEYS:
        if key not in meta:
            raise TraceError(path, f"metadata lacks the key {key!r}")
    try:
        typed = msgspec.convert(meta, RankMeta, strict=True)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"invalid metadata: {_msgspec_reason(exc)}") from exc
    if typed.rank >= typed.world_size:
        raise TraceError(path, f"rank {typed.rank} does not fit world size {typed.world_size}")
    return meta


class TopologyNic(msgspec.Struct):
    name: Text
    numa_node: Int64 | None = None
    pci: Text | None = None
    ib_devices: list[Text] = []
    netdevs: list[Text] = []


class TopologyGpu(msgspec.Struct):
    name: Text
    pci: Text
    numa_node: Int64 | None = None


class HostTopology(msgspec.Struct):
    gpus: list[TopologyGpu] = []
    nics: list[TopologyNic] = []
    matrix: dict[Text, dict[Text, Text]] = {}
    numa_nodes: dict[Text, Text] = {}


class HostMeta(msgspec.Struct):
    """``host-H.meta.json``: what the analysis reads of it, typed."""

    schema: str
    host: Text = ""
    topology: HostTopology | None = None
    nvml: dict[str, Any] | None = None


def read_host_meta(path: Path) -> dict[str, Any]:
    """A host's facts, validated like a rank's metadata (the same bounds and one-line
    errors): the plain dict it was written as."""
    data = read_regular(path, MAX_META_BYTES, "host file")
    try:
        meta = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"not usable JSON ({_msgspec_reason(exc)})") from exc
    except msgspec.DecodeError as exc:
        raise TraceError(path, f"not valid JSON ({_msgspec_reason(exc)})") from exc
    except RecursionError as exc:
        raise TraceError(path, "not usable JSON (nested too deeply)") from exc
    if not isinstance(meta, dict) or meta.get("schema") != schema.HOST_SCHEMA_NAME:
        raise TraceError(path, "not a syncpace host file")
    try:
        msgspec.convert(meta, HostMeta, strict=True)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"invalid host facts: {_msgspec_reason(exc)}") from exc
    return meta


def check_counters(table: pa.Table) -> tuple[pa.Table, Quarantine]:
    """Counter rows a reading can use: no nulls, a time, a known source."""
    rules = _nulls(table, ())
    rules.append(("time before 0", column_numpy(table.column("time_ns"), -1) < 0))
    rules.append(("unknown source", _not_in(table.column("source"), tuple(schema.COUNTER_SOURCES))))
    return _apply(table, rules)


def checksum_warning(path: Path, meta: dict[str, Any]) -> str | None:
    """A warning when the metadata's checksum (written by the writer) does not match
    its content: edited by hand or damaged. ``None`` when it matches or is absent."""
    written = meta.get(schema.CHECKSUM_KEY)
    if written is None:
        return None
    if not isinstance(written, str) or schema.meta_checksum(meta) != written:
        return f"{path}: its checksum does not match its content (edited by hand, or damaged)"
    return None


def _msgspec_reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def visible_reason(exc: Exception) -> str:
    """A decoder's complaint as one short printable line: it may quote the bad value."""
    text = _msgspec_reason(exc)[:200]
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# Files -------------------------------------------------------------------------------
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular(path: Path, limit: int, what: str) -> tuple[int, int]:
    """``(fd, size)`` of ``path`` opened for reading, if it is a regular file within
    ``limit`` bytes. Opening never blocks: ``O_NONBLOCK`` makes a FIFO's open return at
    once, and the type is checked on the open file itself (no race with a rename)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise TraceError(path, f"missing {what}") from exc
    except OSError as exc:
        raise TraceError(path, f"cannot open the {what}: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        for test, kind in _KINDS:
            if test(st.st_mode):
                raise TraceError(path, f"is {kind}, not a regular file (refused, not read)")
        if not stat.S_ISREG(st.st_mode):
            raise TraceError(path, "not a regular file (refused, not read)")
        if st.st_size > limit:
            raise TraceError(
                path, f"{st.st_size:,} bytes is more than a {what} may hold ({limit:,})"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def read_regular(path: Path, limit: int, what: str) -> bytes:
    fd, size = open_regular(path, limit, what)
    try:
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise TraceError(path, f"cannot read the {what}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if total > limit:  # it grew while being read
        raise TraceError(path, f"more than a {what} may hold ({limit:,} bytes)")
    return b"".join(chunks)


# Streams -----------------------------------------------------------------------------
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


def expects_checksums(meta: dict[str, Any]) -> bool:
    """Whether the rank's streams were written with a checksum in every batch: the
    writer that checksums its metadata does so in every batch with rows (older
    writers, version 1 and the simulator checksum neither)."""
    return meta.get(schema.CHECKSUM_KEY) is not None and meta.get("schema_version") != 1


def unvouched_warning(path: Path, batches: list[Any], rows: int, what: str) -> str:
    shown = ", ".join(map(str, batches[:5])) + (", ..." if len(batches) > 5 else "")
    return (
        f"{path}: batch(es) {shown} carry no checksum though its writer checksums every "
        f"batch (rewritten by another program?): {rows:,} {what} checked only against "
        "the format's rules"
    )


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


# Rows --------------------------------------------------------------------------------
@dataclass
class Quarantine:
    """Rows left out of a table, counted by the first rule each one broke."""

    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(self.reasons.values())

    def add(self, other: Quarantine) -> None:
        for reason, n in other.reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + n

    def describe(self, limit: int = 4) -> str:
        items = sorted(self.reasons.items(), key=lambda kv: -kv[1])
        text = ", ".join(f"{n:,} {reason}" for reason, n in items[:limit])
        return text + (f", {len(items) - limit} more reasons" if len(items) > limit else "")


def column_numpy(column: pa.ChunkedArray | pa.Array, fill: int = 0) -> np.ndarray:
    """The column as numpy, nulls as ``fill`` (read-only where it has none: a view)."""
    if column.null_count:
        column = pc.fill_null(column, fill)
    return column.to_numpy(zero_copy_only=False)


def _is_in(column: pa.ChunkedArray | pa.Array, values: tuple[str, ...]) -> np.ndarray:
    """Per row, whether a string column's value is one of ``values`` (a null is not).
    A dictionary-encoded column is tested once per value of its dictionary."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if not chunks or not all(pa.types.is_dictionary(c.type) for c in chunks):
        return column_numpy(
            pc.is_in(column, value_set=pa.array(values, pa.string())), False
        ).astype(bool)
    out = []
    for chunk in chunks:
        hit = column_numpy(
            pc.is_in(chunk.dictionary, value_set=pa.array(values, pa.string())), False
        )
        codes = column_numpy(chunk.indices, 0).astype(np.intp)
        flags = hit.astype(bool)[codes] if len(hit) else np.zeros(len(chunk), dtype=bool)
        if chunk.null_count:
            flags &= chunk.is_valid().to_numpy(zero_copy_only=False)
        out.append(flags)
    return np.concatenate(out) if out else np.zeros(0, dtype=bool)


def _not_in(column: pa.ChunkedArray | pa.Array, allowed: tuple[str, ...]) -> np.ndarray:
    """Per row, whether a string column's value is none of ``allowed`` (a null is)."""
    return ~_is_in(column, allowed)


def _apply(table: Any, rules: list[tuple[str, np.ndarray]]) -> tuple[Any, Quarantine]:
    """Keep the rows no rule flags; count each dropped row under its first rule."""
    bad = np.zeros(table.num_rows, dtype=bool)
    quarantine = Quarantine()
    for reason, flags in rules:
        new = flags & ~bad
        n = int(new.sum())
        if n:
            quarantine.reasons[reason] = quarantine.reasons.get(reason, 0) + n
            bad |= new
    if not bad.any():
        return table, quarantine
    return table.filter(pa.array(~bad)), quarantine


def _nulls(table: Any, nullable: tuple[str, ...]) -> list[tuple[str, np.ndarray]]:
    rules = []
    for name in table.column_names:
        column = table.column(name)
        if name not in nullable and column.null_count:
            rules.append((f"null {name}", column_numpy(pc.is_null(column), False).astype(bool)))
    return rules


def check_events(table: Any, rank: int, world_size: int) -> tuple[Any, Quarantine]:
    """The rows of an events table (or batch) that keep the format's invariants."""
    if all_events_valid(table, rank, world_size):
        return table, Quarantine()
    return _apply(table, event_rules(table, rank, world_size))


def events_valid(table: Any, ranks: np.ndarray, world_size: int) -> np.ndarray:
    """Per row of an events table holding many ranks' rows (``ranks``: the rank each
    row's file belongs to), whether it keeps every invariant of :func:`check_events`:
    one pass over a window of every rank, instead of one per rank and batch."""
    if all_events_valid(table, ranks, world_size):
        return np.ones(table.num_rows, dtype=bool)
    bad = np.zeros(table.num_rows, dtype=bool)
    for _, flags in event_rules(table, ranks, world_size):
        bad |= flags
    return ~bad


def all_events_valid(table: Any, rank: Any, world_size: int) -> bool:
    """Whether every row keeps every rule of :func:`event_rules`, shown from each
    column's range where the rules allow it (a rule per row costs a pass and a
    temporary; a column's least and greatest value show most of them at once): a
    third of the passes for the usual table, of completed calls without waits.
    ``False`` says only that the rules must be applied row by row."""
    if table.num_rows == 0:
        return True
    if any(table.column(n).null_count for n in table.column_names if n != "error"):
        return False
    col = table.column
    allowed = (("op", schema.OPS), ("timing", schema.TIMING_SOURCES), ("status", ("completed",)))
    for name, values in allowed:
        if not all(v in values for v in _names_in(col(name))):
            return False  # a name outside the format, or a call not completed
    step, seq, nbytes = (
        column_numpy(col("step")),
        column_numpy(col("seq")),
        column_numpy(col("bytes")),
    )
    if min(int(step.min()), int(seq.min()), int(nbytes.min())) < 0:
        return False
    group_size, peer = column_numpy(col("group_size")), column_numpy(col("peer"))
    if int(group_size.min()) < 1 or int(group_size.max()) > world_size:
        return False
    if int(peer.min()) < -1 or int(peer.max()) > world_size - 1:
        return False
    enter, exit_ = column_numpy(col("enter_ns")), column_numpy(col("exit_ns"))
    # every call completed: each needs an exit in range, at or after its enter
    if int(enter.min()) < 0 or int(exit_.min()) < 0:
        return False
    if int(enter.max()) > MAX_TIME_NS or int(exit_.max()) > MAX_TIME_NS:
        return False
    span = exit_ - enter  # both within [0, 2^62]: no overflow
    if int(span.min()) < 0 or int(span.max()) > MAX_SPAN_NS:
        return False
    wait = column_numpy(col("wait_ns"))
    if int(wait.min()) != -1 or int(wait.max()) != -1:
        recorded = wait != -1
        if (recorded & ((wait < enter) | (wait > MAX_TIME_NS))).any():
            return False
    if not _device_times_valid(col):
        return False
    return bool((column_numpy(col("rank")) == rank).all())


def _names_in(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """The distinct names of a string column: a dictionary-encoded one's dictionary
    (values no row uses included: a conservative answer), another's unique values."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if chunks and all(pa.types.is_dictionary(c.type) for c in chunks):
        return [v for c in chunks for v in c.dictionary.to_pylist()]
    return pc.unique(column).to_pylist()


def event_rules(table: Any, rank: Any, world_size: int) -> list[tuple[str, np.ndarray]]:
    """The rules of :func:`check_events`, in order: (reason, rows breaking it)."""
    col = table.column
    enter, exit_, wait = (
        column_numpy(col("enter_ns")),
        column_numpy(col("exit_ns")),
        column_numpy(col("wait_ns")),
    )
    status = col("status")
    completed = _is_in(status, ("completed",))
    ended = completed | _is_in(status, ("failed", "timed_out", "aborted"))
    group_size, peer = column_numpy(col("group_size")), column_numpy(col("peer"))
    rules = _nulls(table, ("error",))
    rules += [
        (f"rank column not {rank}", column_numpy(col("rank")) != rank),
        ("unknown op", _not_in(col("op"), schema.OPS)),
        ("unknown timing source", _not_in(col("timing"), schema.TIMING_SOURCES)),
        ("unknown status", _not_in(status, schema.STATUSES)),
        ("negative step", column_numpy(col("step")) < 0),
        ("negative seq", column_numpy(col("seq")) < 0),
        ("negative bytes", column_numpy(col("bytes")) < 0),
        (f"group_size outside 1..{world_size}", (group_size < 1) | (group_size > world_size)),
        (f"peer outside -1..{world_size - 1}", (peer < -1) | (peer >= world_size)),
        ("enter_ns out of range", (enter < 0) | (enter > MAX_TIME_NS)),
        ("completed without exit_ns", completed & (exit_ < 0)),
        ("exit_ns before enter_ns", (exit_ >= 0) & (exit_ < enter) & ended),
        ("exit_ns out of range", (exit_ < -1) | (exit_ > MAX_TIME_NS)),
        ("exit_ns without a completion", ~ended & (exit_ != -1)),
        ("call longer than a week", (exit_ >= enter) & (exit_ - enter > MAX_SPAN_NS)),
        ("wait_ns out of range", (wait != -1) & ((wait < enter) | (wait > MAX_TIME_NS))),
    ]
    return rules + _device_rules(col)


def _device_rules(col: Any) -> list[tuple[str, np.ndarray]]:
    """The device times: each -1 (not observed) or in range, an exit only after an
    entry, and no call longer than a week. Nothing ties them to the host times: the
    device runs behind the host, and each clock has its own uncertainty."""
    enter, exit_ = column_numpy(col("device_enter_ns")), column_numpy(col("device_exit_ns"))
    return [
        ("device_enter_ns out of range", (enter < -1) | (enter > MAX_TIME_NS)),
        ("device_exit_ns out of range", (exit_ < -1) | (exit_ > MAX_TIME_NS)),
        ("device_exit_ns without device_enter_ns", (exit_ >= 0) & (enter < 0)),
        ("device_exit_ns before device_enter_ns", (exit_ >= 0) & (exit_ < enter)),
        (
            "device call longer than a week",
            (exit_ >= 0) & (exit_ >= enter) & (exit_ - enter > MAX_SPAN_NS),
        ),
    ]


def _device_times_valid(col: Any) -> bool:
    """Whether the device times keep :func:`_device_rules`, from their ranges where the
    trace has none (every host-only trace) and row by row otherwise."""
    enter, exit_ = column_numpy(col("device_enter_ns")), column_numpy(col("device_exit_ns"))
    if (
        int(enter.max()) == -1
        and int(exit_.max()) == -1
        and int(min(enter.min(), exit_.min())) == -1
    ):
        return True
    return not any(flags.any() for _, flags in _device_rules(col))


def check_steps(table: Any, rank: int) -> tuple[Any, Quarantine]:
    """The rows of a steps table that keep the format's invariants (row checks only;
    :func:`check_step_order` checks the order of a whole rank's steps)."""
    col = table.column
    start, end, delay, on_device = (
        column_numpy(col("start_ns")),
        column_numpy(col("end_ns")),
        column_numpy(col("pacing_delay_ns")),
        column_numpy(col("device_delay_ns")),
    )
    host_delay = delay - on_device  # what the host slept: within its step
    rules = _nulls(table, ())
    rules += [
        (f"rank column not {rank}", column_numpy(col("rank")) != rank),
        ("negative step", column_numpy(col("step")) < 0),
        ("start_ns out of range", (start < 0) | (start > MAX_TIME_NS)),
        ("end_ns before start_ns", end < start),
        ("end_ns out of range", end > MAX_TIME_NS),
        ("step longer than a week", end - start > MAX_SPAN_NS),
        (
            "pacing delay outside the step",
            (delay < 0) | (host_delay < 0) | (host_delay > np.maximum(end - start, 0)),
        ),
        ("device delay negative", on_device < 0),
    ]
    return _apply(table, rules)


#: Largest step id a summary row may name: a run of 10 steps a second for 13 years.
MAX_STEP = 1 << 32


def check_summaries(table: Any, rank: int) -> tuple[Any, Quarantine]:
    """The rows of a per-step summaries table (``schema.SUMMARY``) that keep its
    invariants: counts and times not negative, the longest call within the step's time
    in calls, failures among the calls, each step once."""
    col = table.column
    calls, failed = column_numpy(col("calls")), column_numpy(col("failed"))
    comm, blocked, longest = (
        column_numpy(col("comm_ns")),
        column_numpy(col("blocked_ns")),
        column_numpy(col("longest_ns")),
    )
    steps = column_numpy(col("step"))
    rules = _nulls(table, ())
    rules += [
        (f"rank column not {rank}", column_numpy(col("rank")) != rank),
        ("step out of range", (steps < 0) | (steps > MAX_STEP)),
        ("negative count", (calls < 0) | (failed < 0) | (column_numpy(col("bytes")) < 0)),
        ("more failures than calls", failed > calls),
        ("time out of range", (comm < 0) | (blocked < 0) | (longest < 0) | (comm > MAX_TIME_NS)),
        ("longest call beyond the time in calls", longest > comm),
    ]
    if steps.size > 1:
        _, first, inverse = np.unique(steps, return_index=True, return_inverse=True)
        rules.append(("duplicate step", first[inverse] < np.arange(steps.size)))
    return _apply(table, rules)


def check_step_order(table: pa.Table) -> tuple[pa.Table, Quarantine]:
    """A rank writes its steps in order, once each: a step id that repeats or goes
    back is damage (a duplicated or replayed batch)."""
    steps = column_numpy(table.column("step"))
    if steps.size < 2:
        return table, Quarantine()
    prior_max = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(steps)[:-1]))
    _, first, inverse = np.unique(steps, return_index=True, return_inverse=True)
    repeat = first[inverse] < np.arange(steps.size)
    rules = [("duplicate step", repeat), ("step id going back", steps <= prior_max)]
    return _apply(table, rules)


#: What names one call in a rank's file: each (group, op, peer) counts its own ``seq``.
_CALL_KEY = ["group", "op", "peer", "seq"]


def check_event_duplicates(table: pa.Table) -> tuple[pa.Table, Quarantine]:
    """One call, one row: a second row with the same (group, op, peer, seq) is a
    duplicate (a batch written twice, files merged)."""
    if table.num_rows < 2:
        return table, Quarantine()
    keys = table.select(_CALL_KEY).append_column("row", pa.array(np.arange(table.num_rows)))
    first = keys.group_by(_CALL_KEY, use_threads=False).aggregate([("row", "min")])
    keep = np.zeros(table.num_rows, dtype=bool)
    keep[first.column("row_min").to_numpy()] = True
    return _apply(table, [("duplicate call", ~keep)])


# The account of a rank -----------------------------------------------------------------
@dataclass(frozen=True)
class RankCompleteness:
    """What one rank's files declare and what they hold."""

    rank: int
    finished: bool
    events_declared: int | None  # events_written in the metadata (a finished rank)
    events_found: int  # rows in the complete batches of the stream
    events_invalid: int  # of those, quarantined
    events_dropped: int  # never written: the in-job buffer was full
    steps_declared: int | None
    steps_found: int
    steps_invalid: int
    cut: tuple[str, ...] = ()  # the streams that ended early ("events", "steps")
    write_error: str | None = None  # why the rank stopped writing, when it said so
    invalid_reasons: dict[str, int] = field(default_factory=dict)
    #: From a dead rank's crash journal: completed (or failed) calls and steps its
    #: streams lack, and calls still in flight when it died (status ``pending``).
    events_recovered: int = 0
    steps_recovered: int = 0
    calls_pending: int = 0
    #: Written, then removed by design: old segments of a rotated (always-on) trace.
    events_rotated: int = 0

    @property
    def events_missing(self) -> int:
        """Declared but not found (a stream cut short, rows removed)."""
        declared = self.events_declared
        return max(declared - self.events_found, 0) if declared is not None else 0

    @property
    def steps_missing(self) -> int:
        declared = self.steps_declared
        return max(declared - self.steps_found, 0) if declared is not None else 0

    @property
    def events_kept(self) -> int:
        return self.events_found - self.events_invalid + self.events_recovered + self.calls_pending

    @property
    def steps_kept(self) -> int:
        return self.steps_found - self.steps_invalid + self.steps_recovered

    @property
    def lossy(self) -> bool:
        return bool(
            not self.finished
            or self.events_missing
            or self.steps_missing
            or self.events_invalid
            or self.steps_invalid
            or self.events_dropped
            or self.cut
            or self.write_error
            or (self.events_declared is not None and self.events_found > self.events_declared)
            or (self.steps_declared is not None and self.steps_found > self.steps_declared)
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cut"] = list(self.cut)
        data["events_missing"] = self.events_missing
        data["steps_missing"] = self.steps_missing
        data["lossy"] = self.lossy
        return data


def completeness_lines(
    completeness: dict[int, RankCompleteness], missing_ranks: list[int], world_size: int
) -> list[str]:
    """One line for the whole trace and one per rank that lost something: what every
    verb prints about loss. Nothing for a trace that carries no account (one built in
    memory rather than read from files)."""
    if not completeness:
        return []
    ranks = list(completeness.values())
    declared = [c.events_declared for c in ranks]
    found = sum(c.events_found for c in ranks)
    kept = sum(c.events_kept for c in ranks)
    steps_found = sum(c.steps_found for c in ranks)
    head = (
        f"completeness: {len(ranks)} of {world_size} ranks, events {kept:,} kept of {found:,} found"
    )
    if all(d is not None for d in declared) and ranks:
        head += f" ({sum(d or 0 for d in declared):,} declared)"
    else:
        head += f" ({sum(1 for d in declared if d is None)} ranks declared no count: unfinished)"
    head += f", steps {sum(c.steps_kept for c in ranks):,} kept of {steps_found:,} found"
    dropped = sum(c.events_dropped for c in ranks)
    if dropped:
        head += f", {dropped:,} dropped in the job"
    lines = [head]
    if missing_ranks:
        lines.append(f"  ranks without any file: {ranges(missing_ranks)}")
    for c in ranks:
        if not c.lossy:
            continue
        parts = []
        if not c.finished:
            parts.append("did not finish")
        if c.write_error:
            parts.append(f"stopped writing: {c.write_error}")
        if c.events_declared is not None and c.events_found != c.events_declared:
            parts.append(f"events {c.events_found:,} found of {c.events_declared:,} declared")
        if c.steps_declared is not None and c.steps_found != c.steps_declared:
            parts.append(f"steps {c.steps_found:,} found of {c.steps_declared:,} declared")
        if c.cut:
            parts.append(f"cut: {', '.join(c.cut)}")
        if c.events_dropped:
            parts.append(f"{c.events_dropped:,} events dropped (buffer full)")
        if c.events_invalid:
            parts.append(f"{c.events_invalid:,} events invalid")
        if c.steps_invalid:
            parts.append(f"{c.steps_invalid:,} steps invalid")
        if c.events_recovered or c.steps_recovered or c.calls_pending:
            parts.append(
                f"{c.events_recovered:,} events and {c.steps_recovered:,} steps recovered "
                f"from its crash journal, {c.calls_pending:,} calls in flight"
            )
        lines.append(f"  rank {c.rank}: " + "; ".join(parts))
    return lines


def ranges(values: list[int], dash: str = "-") -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"`` (sorted, distinct values): readable rank lists."""
    if not values:
        return ""
    parts: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}{dash}{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(parts)
