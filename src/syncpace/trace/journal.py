"""The crash journal: a memory-mapped, fixed-record file the kernel keeps when a rank dies.

A rank's Arrow streams are written by a background thread once per flush interval, so
a rank killed by SIGKILL or SIGABRT (``os.abort()``, ``std::terminate``, a backend's
abort) would lose up to one interval. The tracer therefore also packs every record
into ``rank-R.journal`` the moment it is made. The file is mapped shared: a store into
it lands in the page cache at once, and the kernel writes it back whether or not the
process lives. Only a record being packed at the instant of death can be lost, and it
is recognised as torn. (A power loss is another matter: nothing here calls ``msync``.)

Layout (little-endian, ``RECORD`` bytes per record)::

    header   4096 bytes   magic, version, sizes, rank, pid, clean-close flag
    ring     ring_slots records       events and steps, record ``seq`` in slot seq % ring_slots
    inflight inflight_slots records   calls entered and not yet complete ("pending")
    strings  string_bytes            append-only table: id, length, UTF-8, CRC-32

A record's first word is its sequence number and its last word that number XOR
``COMMIT``; ``struct`` packs fields front to back, so a record cut off by death has a
head that does not match its tail. Group names, dtypes and error texts are interned in
the string table (written before the first record that uses them); ops, timing
sources and statuses are indices into the schema's tuples.

The ring is reused once the flusher has written its records into the Arrow streams.
Each Arrow batch made from the ring carries ``journal_hi`` in its custom metadata: the
first sequence number it does not cover. Recovery (:func:`recover`) therefore takes
from the journal exactly the records of sequence ``journal_hi`` and later, so nothing
is lost and nothing is counted twice. On a clean close the journal is deleted.
"""

from __future__ import annotations

import itertools
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from syncpace.trace import schema
from syncpace.trace.columns import EV, ST, complete_event, complete_step

JOURNAL_SUFFIX = ".journal"
MAGIC = b"SPJRNL\x00\x01"
VERSION = 2  # 2: the device times
HEADER_BYTES = 4096
COMMIT = 0x5350_4A52_4E4C_5F31

EVENT, STEP, ENTER, VOID = 1, 2, 3, 4

#: seq kind op timing status group | step gseq bytes enter exit wait | group_size peer
#: dtype (pad) error | entry | device_enter device_exit | tail. A step's record keeps
#: its start and end in enter and exit, its pacing delay in wait, the part of it on the
#: device in device_enter and its first backward pass in device_exit.
RECORD = struct.Struct("<qBBBBIqqqqqqiiHxxIqqqq")
RECORD_DTYPE = np.dtype(
    [
        ("seq", "<i8"),
        ("kind", "u1"),
        ("op", "u1"),
        ("timing", "u1"),
        ("status", "u1"),
        ("group", "<u4"),
        ("step", "<i8"),
        ("gseq", "<i8"),
        ("bytes", "<i8"),
        ("enter", "<i8"),
        ("exit", "<i8"),
        ("wait", "<i8"),
        ("group_size", "<i4"),
        ("peer", "<i4"),
        ("dtype", "<u2"),
        ("pad", "<u2"),
        ("error", "<u4"),
        ("entry", "<i8"),
        ("device_enter", "<i8"),
        ("device_exit", "<i8"),
        ("tail", "<i8"),
    ]
)
assert RECORD.size == RECORD_DTYPE.itemsize == 112
_HEADER = struct.Struct("<8sIIQQQqqI")  # magic version record ring inflight strings rank pid closed
_CLOSED_AT = struct.calcsize("<8sIIQQQqq")
_STRING_HEAD = struct.Struct("<IH")
_CRC = struct.Struct("<I")
_HEAD = struct.Struct("<q")

#: The schema's append-only code tables; code 0 means "not one of these".
OP_CODES, TIMING_CODES, STATUS_CODES = schema.OP_CODES, schema.TIMING_CODES, schema.STATUS_CODES


def _names(codes: dict[str, int], unknown: str) -> pa.Array:
    """Code -> name, ``unknown`` for 0 and for any code past the table."""
    names = [unknown] * (max(codes.values()) + 2)
    for name, code in codes.items():
        names[code] = name
    return pa.array(names)


_OPS = _names(OP_CODES, "unknown")
_TIMINGS = _names(TIMING_CODES, "unobserved")
_STATUSES = _names(STATUS_CODES, "unobserved")
_OP_GET, _TIMING_GET, _STATUS_GET = OP_CODES.get, TIMING_CODES.get, STATUS_CODES.get
_SIZE = RECORD.size
_PENDING = STATUS_CODES["pending"]
_UNOBSERVED = TIMING_CODES["unobserved"]
#: Token of a call that holds no in-flight slot (the table was full, or no journal).
NO_SLOT = 0xFFFF


def journal_path(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / f"{schema.rank_stem(rank)}{JOURNAL_SUFFIX}"


class Journal:
    """The writing side, inside the rank. Every method is safe from any thread."""

    def __init__(
        self,
        path: Path,
        rank: int,
        *,
        ring_slots: int = 1 << 16,
        inflight_slots: int = 4096,
        string_bytes: int = 1 << 18,
    ) -> None:
        if not 1 <= inflight_slots < NO_SLOT:
            raise ValueError(f"inflight_slots must be in 1..{NO_SLOT - 1}, got {inflight_slots}")
        self.path = Path(path)
        self.ring_slots = ring_slots
        self.inflight_slots = inflight_slots
        self._ring_at = HEADER_BYTES
        self._inflight_at = HEADER_BYTES + ring_slots * RECORD.size
        self._strings_at = self._inflight_at + inflight_slots * RECORD.size
        self._strings_end = self._strings_at + string_bytes
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            # Every block is reserved now: a store into a mapped page the file system
            # cannot back (a full disk) is a SIGBUS, which would kill the job. Without
            # room, there is no journal (an OSError the writer logs), never a dead rank.
            try:
                os.posix_fallocate(fd, 0, self._strings_end)
            except OSError:
                os.close(fd)
                fd = -1
                self.path.unlink(missing_ok=True)
                raise
            self._mm = mmap.mmap(fd, self._strings_end)
        finally:
            if fd >= 0:
                os.close(fd)
        _HEADER.pack_into(
            self._mm,
            0,
            MAGIC,
            VERSION,
            RECORD.size,
            ring_slots,
            inflight_slots,
            string_bytes,
            rank,
            os.getpid(),
            0,
        )
        self._view = np.frombuffer(
            self._mm, RECORD_DTYPE, ring_slots, offset=self._ring_at
        )  # the flusher's window on the ring
        self._lock = threading.Lock()
        self._next = 1  # sequence number of the next record
        self.consumed = 1  # records before this one are in the Arrow streams
        self._entries = itertools.count(1)
        self._free = list(range(inflight_slots - 1, -1, -1))
        self._string_at = self._strings_at
        self.strings: list[str | None] = [None]  # id 0 is "none"
        self._ids: dict[str | None, int] = {None: 0}
        self.unsaved_strings = 0  # strings the table had no room for
        self.overflow = 0  # records that found the ring full
        self.closed = False

    # Hot path ------------------------------------------------------------------
    def intern(self, text: str | None) -> int:
        code = self._ids.get(text)
        if code is not None:
            return code
        with self._lock:
            code = self._ids.get(text)
            if code is None:
                code = len(self.strings)
                self.strings.append(text)
                self._save_string(code, str(text))
                self._ids[text] = code
        return code

    def _save_string(self, code: int, text: str) -> None:
        data = text.encode("utf-8", "replace")[:4096]
        head = _STRING_HEAD.pack(code, len(data))
        end = self._string_at + len(head) + len(data) + _CRC.size
        if self.closed or end > self._strings_end:
            self.unsaved_strings += 1
            return
        at = self._string_at
        self._mm[at + len(head) : at + len(head) + len(data)] = data
        _CRC.pack_into(self._mm, end - _CRC.size, zlib.crc32(head + data))
        self._mm[at : at + len(head)] = head  # last: a torn entry ends the scan
        self._string_at = end

    def event(self, row: Sequence[Any], token: int = NO_SLOT) -> bool:
        """Pack one event row (positions :class:`EV`); release its in-flight slot. False
        when the ring is full (the caller keeps the row some other way)."""
        row = complete_event(row)
        ids = self._ids
        group = ids.get(row[EV.group])
        if group is None:
            group = self.intern(row[EV.group])
        dtype = ids.get(row[EV.dtype])
        if dtype is None:
            dtype = self.intern(row[EV.dtype])
        error = ids.get(row[EV.error])
        if error is None:
            error = self.intern(row[EV.error])
        with self._lock:
            seq = self._next
            if self.closed or seq - self.consumed >= self.ring_slots:
                self.overflow += not self.closed
                ok = False
            else:
                RECORD.pack_into(
                    self._mm,
                    self._ring_at + (seq % self.ring_slots) * _SIZE,
                    seq,
                    EVENT,
                    _OP_GET(row[EV.op], 0),
                    _TIMING_GET(row[EV.timing], 0),
                    _STATUS_GET(row[EV.status], 0),
                    group,
                    row[EV.step],
                    row[EV.seq],
                    row[EV.bytes],
                    row[EV.enter_ns],
                    row[EV.exit_ns],
                    row[EV.wait_ns],
                    row[EV.group_size],
                    row[EV.peer],
                    dtype,
                    error,
                    token >> 16,
                    row[EV.device_enter_ns],
                    row[EV.device_exit_ns],
                    seq ^ COMMIT,
                )
                self._next = seq + 1  # only once packed: a bad row leaves no hole
                ok = True
        slot = token & 0xFFFF
        if slot != NO_SLOT and not self.closed:
            # after the event: a death in between leaves both, and recovery keeps the event
            _HEAD.pack_into(self._mm, self._inflight_at + slot * _SIZE, 0)
            self._free.append(slot)
        return ok

    def step(self, row: Sequence[Any]) -> bool:
        """Pack one step row (positions :class:`ST`). False when the ring is full."""
        row = complete_step(row)
        with self._lock:
            seq = self._next
            if self.closed or seq - self.consumed >= self.ring_slots:
                self.overflow += not self.closed
                return False
            RECORD.pack_into(
                self._mm,
                self._ring_at + (seq % self.ring_slots) * RECORD.size,
                seq,
                STEP,
                0,
                0,
                0,
                0,
                row[ST.step],
                0,
                0,
                row[ST.start_ns],
                row[ST.end_ns],
                row[ST.pacing_delay_ns],
                0,
                -1,
                0,
                0,
                0,
                row[ST.device_delay_ns],
                row[ST.backward_ns],
                seq ^ COMMIT,
            )
            self._next = seq + 1
        return True

    def begin(self, row: Sequence[Any]) -> int:
        """Note a call entered (its event row without the exit): a token for
        :meth:`event` or :meth:`release`. After a crash it reads as ``pending``.

        No lock: the entry number comes from an atomic counter, the slot from an
        atomic ``list.pop``, and the slot is this call's alone until released."""
        entry = next(self._entries)
        if self.closed:
            return (entry << 16) | NO_SLOT
        try:
            slot = self._free.pop()
        except IndexError:  # more calls in flight than slots: this one is not journaled
            return (entry << 16) | NO_SLOT
        ids = self._ids
        group = ids.get(row[EV.group])
        if group is None:
            group = self.intern(row[EV.group])
        dtype = ids.get(row[EV.dtype])
        if dtype is None:
            dtype = self.intern(row[EV.dtype])
        try:
            RECORD.pack_into(
                self._mm,
                self._inflight_at + slot * _SIZE,
                entry,
                ENTER,
                _OP_GET(row[EV.op], 0),
                _UNOBSERVED,
                _PENDING,
                group,
                row[EV.step],
                row[EV.seq],
                row[EV.bytes],
                row[EV.enter_ns],
                -1,
                -1,
                row[EV.group_size],
                row[EV.peer],
                dtype,
                0,
                entry,
                -1,
                -1,
                entry ^ COMMIT,
            )
        except (struct.error, TypeError, IndexError):
            self._free.append(slot)
            return (entry << 16) | NO_SLOT
        return (entry << 16) | slot

    def release(self, token: int) -> None:
        """Free a call's in-flight slot without recording it."""
        slot = token & 0xFFFF
        if slot == NO_SLOT:
            return
        if not self.closed:
            _HEAD.pack_into(self._mm, self._inflight_at + slot * _SIZE, 0)
            self._free.append(slot)

    # Flusher -------------------------------------------------------------------
    def take(self) -> tuple[np.ndarray, int]:
        """The committed records not yet consumed (a copy, in sequence order) and the
        sequence number after them. Call :meth:`advance` once they are written."""
        with self._lock:
            lo, hi = self.consumed, self._next
        if hi <= lo:
            return self._view[:0].copy(), lo
        index = np.arange(lo, hi, dtype=np.int64) % self.ring_slots
        records = self._view[index]  # fancy indexing copies
        committed = (records["seq"] == np.arange(lo, hi)) & (
            records["tail"] == (records["seq"] ^ COMMIT)
        )
        if not committed.all():  # cannot happen while packing holds the lock: be safe
            cut = int(np.argmin(committed))
            records, hi = records[:cut], lo + cut
        return records, hi

    def advance(self, hi: int) -> None:
        with self._lock:
            self.consumed = max(self.consumed, hi)

    def close(self, remove: bool = True) -> None:
        """Stop recording; delete the file (``remove``) or mark it closed."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._view = None  # the map cannot close while a view exports it
            try:
                struct.pack_into("<I", self._mm, _CLOSED_AT, 1)
                self._mm.close()
            except (BufferError, ValueError):  # a numpy view still exports the buffer
                pass
        if remove:
            try:
                self.path.unlink()
            except OSError:
                pass


# Decoding ---------------------------------------------------------------------
def events_table(
    records: np.ndarray,
    rank: int,
    strings: Sequence[str | None],
    offset_ns: int,
    *,
    status: str | None = None,
) -> pa.Table:
    """Event records as a table of schema.EVENTS, timestamps shifted by ``offset_ns``
    (``-1`` stays ``-1``); ``status`` overrides the recorded one (``pending``). Codes
    are turned into text by ``take`` on small dictionaries, in C++."""
    n = len(records)
    table = pa.array([*strings, None], type=pa.string())  # an unknown id reads as null

    def text(ids: np.ndarray, names: pa.Array = table) -> pa.Array:
        codes = np.minimum(ids.astype(np.int64), len(names) - 1)
        return pc.take(names, pa.array(codes))

    def aligned(values: np.ndarray) -> np.ndarray:
        return np.where(values >= 0, values + offset_ns, values)

    columns = {
        "rank": pa.array(np.full(n, rank, dtype=np.int32)),
        "step": pa.array(records["step"]),
        "group": text(records["group"]),
        "group_size": pa.array(records["group_size"]),
        "seq": pa.array(records["gseq"]),
        "op": text(records["op"], _OPS),
        "bytes": pa.array(records["bytes"]),
        "dtype": text(records["dtype"]),
        "peer": pa.array(records["peer"]),
        "enter_ns": pa.array(aligned(records["enter"])),
        "exit_ns": pa.array(aligned(records["exit"])),
        "timing": text(records["timing"], _TIMINGS),
        "status": (
            pa.array(np.full(n, status, dtype=object), type=pa.string())
            if status
            else text(records["status"], _STATUSES)
        ),
        "error": text(records["error"]),
        "wait_ns": pa.array(aligned(records["wait"])),
        "device_enter_ns": pa.array(aligned(records["device_enter"])),
        "device_exit_ns": pa.array(aligned(records["device_exit"])),
    }
    arrays = [columns[f.name].cast(f.type) for f in schema.EVENTS]
    return pa.Table.from_arrays(arrays, schema=schema.EVENTS)


def steps_table(records: np.ndarray, rank: int, offset_ns: int) -> pa.Table:
    n = len(records)
    columns = {
        "rank": np.full(n, rank, dtype=np.int32),
        "step": records["step"],
        "start_ns": np.where(records["enter"] >= 0, records["enter"] + offset_ns, -1),
        "end_ns": np.where(records["exit"] >= 0, records["exit"] + offset_ns, -1),
        "pacing_delay_ns": records["wait"],
        "device_delay_ns": records["device_enter"],
        "backward_ns": np.where(
            records["device_exit"] >= 0, records["device_exit"] + offset_ns, -1
        ),
    }
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema.STEPS]
    return pa.Table.from_arrays(arrays, schema=schema.STEPS)


# Recovery ---------------------------------------------------------------------
@dataclass(frozen=True)
class Recovered:
    """What a dead rank's journal adds to its Arrow streams."""

    events: pa.Table  # completed (or failed) calls the streams lack
    pending: pa.Table  # calls entered and never completed, status "pending"
    steps: pa.Table
    torn: int  # records cut off by the death (or damaged)
    note: str


def _read_strings(mm: Any, at: int, end: int) -> dict[int, str]:
    strings: dict[int, str] = {}
    while at + _STRING_HEAD.size <= end:
        code, length = _STRING_HEAD.unpack_from(mm, at)
        stop = at + _STRING_HEAD.size + length + _CRC.size
        if code == 0 or stop > end:
            break
        data = bytes(mm[at + _STRING_HEAD.size : stop - _CRC.size])
        if _CRC.unpack_from(mm, stop - _CRC.size)[0] != zlib.crc32(
            _STRING_HEAD.pack(code, length) + data
        ):
            break
        strings[code] = data.decode("utf-8", "replace")
        at = stop
    return strings


def recover(
    path: Path, rank: int, events_hi: int, steps_hi: int, offset_ns: int
) -> Recovered | None:
    """Records of ``path`` the streams lack, or None when the journal is unreadable or
    was closed cleanly. ``*_hi``: journal records below them are in the streams."""
    try:
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    try:
        if len(mm) < HEADER_BYTES:
            return None
        magic, version, size, ring, inflight, nstrings, file_rank, _pid, closed = (
            _HEADER.unpack_from(mm, 0)
        )
        expected = HEADER_BYTES + (ring + inflight) * RECORD.size + nstrings
        if magic != MAGIC or version != VERSION or size != RECORD.size or file_rank != rank:
            return None
        if closed or len(mm) < expected:
            return None
        inflight_at = HEADER_BYTES + ring * RECORD.size
        strings_at = inflight_at + inflight * RECORD.size
        ring_records = np.frombuffer(mm, RECORD_DTYPE, ring, offset=HEADER_BYTES).copy()
        inflight_records = np.frombuffer(mm, RECORD_DTYPE, inflight, offset=inflight_at).copy()
        table = _read_strings(mm, strings_at, strings_at + nstrings)
    finally:
        mm.close()
    used = ring_records["seq"] != 0
    valid = used & (ring_records["tail"] == (ring_records["seq"] ^ COMMIT))
    valid &= np.isin(ring_records["kind"], (EVENT, STEP))
    torn = int((used & ~valid).sum())
    good = ring_records[valid]
    good = good[np.argsort(good["seq"], kind="stable")]
    events = good[(good["kind"] == EVENT) & (good["seq"] >= events_hi)]
    steps = good[(good["kind"] == STEP) & (good["seq"] >= steps_hi)]
    live = inflight_records["seq"] != 0
    entered = live & (inflight_records["tail"] == (inflight_records["seq"] ^ COMMIT))
    entered &= inflight_records["kind"] == ENTER
    torn += int((live & ~entered).sum())
    pending = inflight_records[entered]
    # a call that completed just before the death can hold its slot still: its event wins
    done = good["entry"][(good["kind"] == EVENT) & (good["entry"] > 0)]
    pending = pending[~np.isin(pending["entry"], done)]
    pending = pending[np.argsort(pending["entry"], kind="stable")]
    strings = [None] * (max(table, default=0) + 1)
    for code, text in table.items():
        strings[code] = text
    note = (
        f"rank {rank}: {len(events)} events and {len(steps)} steps recovered from its "
        f"journal, {len(pending)} calls were still in flight (status pending)"
        + (f", {torn} torn records left out" if torn else "")
    )
    return Recovered(
        events_table(events, rank, strings, offset_ns),
        events_table(pending, rank, strings, offset_ns, status="pending"),
        steps_table(steps, rank, offset_ns),
        torn,
        note,
    )


def recover_rank(
    stem: Path, rank: int, meta: dict[str, Any], events_hi: int, steps_hi: int
) -> Recovered | None:
    """Recovery for the rank whose files start with ``stem`` (``run/rank-00003``), when
    it left a journal behind; ``*_hi`` are its streams' ``journal_hi`` (the reader's
    :class:`~syncpace.trace.validate.stream.Stream` finds them among the intact batches).
    Timestamps are aligned with the rank's last clock offset."""
    path = Path(f"{stem}{JOURNAL_SUFFIX}")
    if not path.exists():
        return None
    clock = meta.get("clock") if isinstance(meta.get("clock"), dict) else {}
    offset = clock.get("offset_ns") if clock else None
    offset = int(offset) if isinstance(offset, (int, float)) and not isinstance(offset, bool) else 0
    return recover(path, rank, events_hi, steps_hi, offset)
