"""Rotating event segments for always-on tracing: bounded disk, recent detail, kept windows.

A rank's events go to a sequence of Arrow IPC stream files (``schema.segment_name``).
A new segment starts every ``segment_s`` seconds, or sooner once the current one reaches
a tenth of the budget. Closed segments are removed oldest first when they are older than
``keep_s`` or when keeping them would exceed ``budget_bytes``; segments that overlap a
*pinned* window (an anomaly the live monitor saw, a stall, a request through the control
file) survive age, and give way to the budget only after every unpinned one has.

So the disk a rank's events use stays under the budget (plus at most one flush batch
past the rotation size), whatever the run's length. What was removed is accounted for
(``account``) so the reader can tell "rotated out by design" from "lost": the steps
whose events are gone, how many events and bytes.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from syncpace.trace import schema

log = logging.getLogger("syncpace")

#: Pinned windows remembered (the oldest are forgotten first; their segments stay pinned
#: only through the windows still listed).
MAX_PINS = 64
#: The smallest segment worth a file of its own.
MIN_SEGMENT_BYTES = 64 * 1024


class Stream(Protocol):
    rows: deque[tuple]
    written: int

    def drain(self, offset_ns: int) -> pa.RecordBatch | None: ...

    def write_table(self, table: pa.Table, hi: int) -> pa.Table: ...

    def size(self) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class RotationPolicy:
    """How a rank's events rotate: see the module docstring."""

    segment_s: float
    keep_s: float  # 0: closed segments go only when the budget needs their room
    budget_bytes: int

    @property
    def max_segment_bytes(self) -> int:
        return max(self.budget_bytes // 10, MIN_SEGMENT_BYTES)


@dataclass
class _Segment:
    index: int
    path: Path
    opened_ns: int  # monotonic
    closed_ns: int = -1
    rows: int = 0
    bytes: int = 0
    first_step: int = -1
    last_step: int = -1

    def overlaps(self, start_ns: int, end_ns: int, now_ns: int) -> bool:
        closed = self.closed_ns if self.closed_ns >= 0 else now_ns
        # A segment opened exactly where a window ends holds nothing of it.
        return self.opened_ns < end_ns and start_ns <= closed


@dataclass
class _Pin:
    start_ns: int
    end_ns: int
    reason: str
    step: int


@dataclass
class SegmentAccount:
    """What rotation did, as the metadata records it (``meta["segments"]``)."""

    segment_s: float
    keep_s: float
    budget_bytes: int
    written: int = 0  # segment files started
    removed: int = 0
    removed_events: int = 0
    removed_bytes: int = 0
    #: Steps whose events were (partly) removed, as merged [first, last] intervals.
    removed_steps: list[list[int]] = field(default_factory=list)
    pins: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "segment_s": self.segment_s,
            "keep_s": self.keep_s,
            "budget_bytes": self.budget_bytes,
            "written": self.written,
            "removed": self.removed,
            "removed_events": self.removed_events,
            "removed_bytes": self.removed_bytes,
            "removed_steps": [list(x) for x in self.removed_steps],
            "pins": list(self.pins),
        }


def add_interval(intervals: list[list[int]], first: int, last: int) -> None:
    """Merge [first, last] into sorted, disjoint, non-adjacent ``intervals`` in place."""
    merged: list[list[int]] = []
    for a, b in sorted([*intervals, [first, last]]):
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    intervals[:] = merged


class SegmentedEvents:
    """The writer's events stream, rotated: the same ``rows`` deque, ``drain`` and
    ``close``, with ``pin`` and an ``account`` of what rotation removed."""

    def __init__(
        self,
        directory: Path,
        rank: int,
        open_stream: Callable[[Path], Stream],
        policy: RotationPolicy,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.dir, self.rank, self.policy = directory, rank, policy
        self._open, self._clock = open_stream, clock
        self.rows: deque[tuple] = deque()  # shared by every segment's stream, in turn
        self.written = 0
        self.account = SegmentAccount(policy.segment_s, policy.keep_s, policy.budget_bytes)
        self.changed = True  # the account differs from what the metadata last recorded
        self._segments: list[_Segment] = []
        self._pins: list[_Pin] = []
        self._stream: Stream = self._start(0)

    @property
    def current_path(self) -> Path:
        return self._segments[-1].path

    def _start(self, index: int) -> Stream:
        path = self.dir / schema.segment_name(self.rank, index)
        stream = self._open(path)
        stream.rows = self.rows
        self._segments.append(_Segment(index, path, self._clock(), bytes=stream.size()))
        self.account.written += 1
        self.changed = True
        return stream

    def drain(self, offset_ns: int) -> pa.RecordBatch | None:
        batch = self._stream.drain(offset_ns)
        self._written(batch)
        return batch

    def write_table(self, table: pa.Table, hi: int) -> pa.Table:
        """Rows from the crash journal (see the writer), rotated like drained ones."""
        self._written(self._stream.write_table(table, hi))
        return table

    def _written(self, batch: pa.RecordBatch | pa.Table | None) -> None:
        segment = self._segments[-1]
        if batch is not None and batch.num_rows:
            steps = pc.min_max(batch.column("step"))
            lo, hi = steps["min"].as_py(), steps["max"].as_py()
            segment.first_step = lo if segment.first_step < 0 else min(segment.first_step, lo)
            segment.last_step = max(segment.last_step, hi)
            segment.rows += batch.num_rows
            self.written += batch.num_rows
        segment.bytes = self._stream.size()
        now = self._clock()
        age_s = (now - segment.opened_ns) / 1e9
        if segment.rows and (
            age_s >= self.policy.segment_s or segment.bytes >= self.policy.max_segment_bytes
        ):
            self._rotate(now)

    def _rotate(self, now: int) -> None:
        self._stream.close()
        closed = self._segments[-1]
        closed.closed_ns, closed.bytes = now, _size(closed.path, closed.bytes)
        self._stream = self._start(closed.index + 1)
        self._enforce(now)

    def _pinned(self, segment: _Segment, now: int) -> bool:
        return any(segment.overlaps(p.start_ns, p.end_ns, now) for p in self._pins)

    def _enforce(self, now: int) -> None:
        """Remove closed segments: expired unpinned ones, then whatever the budget needs."""
        policy = self.policy
        closed = [s for s in self._segments if s.closed_ns >= 0]
        room = policy.budget_bytes - policy.max_segment_bytes  # the open segment's share
        total = sum(s.bytes for s in closed)
        for segment in list(closed):
            expired = policy.keep_s > 0 and (now - segment.closed_ns) / 1e9 > policy.keep_s
            if expired and not self._pinned(segment, now):
                total -= self._remove(segment)
        for want_pinned in (False, True):
            for segment in [s for s in self._segments if s.closed_ns >= 0]:
                if total <= room:
                    return
                if self._pinned(segment, now) == want_pinned:
                    total -= self._remove(segment)

    def _remove(self, segment: _Segment) -> int:
        try:
            segment.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("syncpace: cannot remove the old trace segment %s: %s", segment.path, exc)
            return 0
        self._segments.remove(segment)
        account = self.account
        account.removed += 1
        account.removed_events += segment.rows
        account.removed_bytes += segment.bytes
        if segment.rows:
            add_interval(account.removed_steps, segment.first_step, segment.last_step)
        self.changed = True
        return segment.bytes

    def pin(self, before_s: float, after_s: float, reason: str, step: int) -> None:
        """Keep the segments of ``before_s`` seconds back to ``after_s`` seconds ahead."""
        now = self._clock()
        pin = _Pin(now - int(before_s * 1e9), now + int(after_s * 1e9), reason, step)
        last = self._pins[-1] if self._pins else None
        if last is not None and last.reason == reason and pin.start_ns <= last.end_ns:
            last.end_ns = max(last.end_ns, pin.end_ns)  # the same episode goes on
        else:
            self._pins.append(pin)
        del self._pins[:-MAX_PINS]
        self.account.pins = [
            {"reason": p.reason, "step": p.step, "seconds": (p.end_ns - p.start_ns) / 1e9}
            for p in self._pins
        ]
        self.changed = True

    def disk_bytes(self) -> int:
        return sum(s.bytes for s in self._segments)

    def close(self) -> None:
        self._stream.close()
        segment = self._segments[-1]
        segment.closed_ns, segment.bytes = self._clock(), _size(segment.path, segment.bytes)


def _size(path: Path, fallback: int) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return fallback
