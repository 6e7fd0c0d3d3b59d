"""What the hang measurement finds: every member's place at a group's hang point
(:class:`RankAt`), calls that disagree (:class:`Mismatch`), calls skipped
(:class:`Skip`), the hang points (:class:`HangPoint`) and the whole
(:class:`HangAnalysis`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from syncpace.trace.stall import Call, Frame

#: Statuses of a call that was entered and did not complete.
OPEN = ("in_flight", "pending", "failed", "timed_out", "aborted")
FAILED = ("failed", "timed_out", "aborted")


@dataclass(frozen=True)
class RankAt:
    """A member of the group at the hang point and what it was doing."""

    rank: int
    host: str
    state: str  # waiting | completed | stuck | died | silent | exited | progressing | absent
    call: Call | None = None  # its call at the hang point, if it entered it
    last_call: Call | None = None  # otherwise: its last call in the group
    where: str = ""  # innermost relevant frame, "function (file:line)"
    stack: tuple[Frame, ...] = ()  # main thread's stack, outermost first
    stack_source: str = ""  # "stall record", "last call (Flight Recorder)", ...
    seen_ns: int = -1  # when its last stall record was written
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "state": self.state,
            "call": self.call.to_json() if self.call else None,
            "last_call": self.last_call.to_json() if self.last_call else None,
            "where": self.where,
            "stack": [str(f) for f in self.stack],
            "stack_code": [f.code for f in self.stack],
            "stack_source": self.stack_source,
            "seen_ns": self.seen_ns,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Mismatch:
    """Calls at one (group, seq) that disagree; ``sides`` maps a value to its ranks."""

    seq: int
    field: str  # op | bytes | dtype
    sides: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def minority(self) -> tuple[int, ...]:
        sizes = sorted(len(r) for _, r in self.sides)
        if len(sizes) > 1 and sizes[0] == sizes[1]:
            return ()  # no side is the odd one out
        return min((r for _, r in self.sides), key=len)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "field": self.field,
            "sides": [{"value": v, "ranks": list(r)} for v, r in self.sides],
        }


@dataclass(frozen=True)
class Skip:
    """Ranks whose calls of a group run ahead by iteration: they skipped (or added)
    calls in ``step``: ``counts`` is their number of calls there, ``expected`` the
    others'."""

    seq: int
    step: int
    ranks: tuple[int, ...]
    counts: dict[int, int]
    expected: int

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "step": self.step,
            "ranks": list(self.ranks),
            "counts": {str(k): v for k, v in self.counts.items()},
            "expected": self.expected,
        }


@dataclass(frozen=True)
class HangPoint:
    """One process group's hang point and every member's place there."""

    group: str
    seq: int
    op: str
    bytes: int
    dtype: str
    members: tuple[int, ...]
    ranks: tuple[RankAt, ...]
    since_ns: int  # earliest entry into the call among the ranks that wait
    observed_until_ns: int  # latest moment the data covers
    stalled: bool  # some rank's watchdog or failure says it is stuck or failed here
    mismatch: Mismatch | None = None
    skip: Skip | None = None

    def of(self, *states: str) -> tuple[RankAt, ...]:
        return tuple(r for r in self.ranks if r.state in states)

    @property
    def waiting(self) -> tuple[RankAt, ...]:
        return self.of("waiting")

    @property
    def missing(self) -> tuple[RankAt, ...]:
        """Members the others wait for: they never entered the call, or left no trace."""
        return self.of("stuck", "died", "silent", "exited", "progressing", "absent")

    @property
    def waited_ns(self) -> int:
        return max(0, self.observed_until_ns - self.since_ns) if self.since_ns >= 0 else 0

    @property
    def failed(self) -> tuple[RankAt, ...]:
        return tuple(r for r in self.waiting if r.call is not None and r.call.status in FAILED)

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "seq": self.seq,
            "op": self.op,
            "bytes": self.bytes,
            "dtype": self.dtype,
            "members": list(self.members),
            "ranks": [r.to_json() for r in self.ranks],
            "since_ns": self.since_ns,
            "observed_until_ns": self.observed_until_ns,
            "waited_s": round(self.waited_ns / 1e9, 3),
            "stalled": self.stalled,
            "mismatch": self.mismatch.to_json() if self.mismatch else None,
            "skip": self.skip.to_json() if self.skip else None,
        }


@dataclass(frozen=True)
class HangAnalysis:
    """Every group's hang point, the root one first; mismatches outside any hang."""

    points: tuple[HangPoint, ...]
    mismatches: tuple[tuple[str, Mismatch], ...] = ()
    world_size: int = 0
    run: str = ""
    source: str = "trace"
    stall_records: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def root(self) -> HangPoint | None:
        return self.points[0] if self.points else None

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "source": self.source,
            "world_size": self.world_size,
            "stall_records": self.stall_records,
            "points": [p.to_json() for p in self.points],
            "mismatches": [{"group": g, **m.to_json()} for g, m in self.mismatches],
            "notes": list(self.notes),
        }
