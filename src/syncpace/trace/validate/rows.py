"""Rows of the Arrow streams against the format's invariants (:func:`check_events`,
:func:`check_steps`, ...). Rows that break one are *quarantined*: left out of the tables
and counted per reason, so analysis never works on them and the loss is reported,
never silent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from syncpace.trace import schema

#: Latest plausible timestamp (about the year 2116 as Unix-epoch nanoseconds); above it,
#: a value is damage (int64-max and its neighbours).
MAX_TIME_NS = 1 << 62
#: Longest plausible call or iteration: a week. A longer one is damage, not a timeout.
MAX_SPAN_NS = 7 * 24 * 3600 * 10**9


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


def check_counters(table: pa.Table) -> tuple[pa.Table, Quarantine]:
    """Counter rows a reading can use: no nulls, a time, a known source."""
    rules = _nulls(table, ())
    rules.append(("time before 0", column_numpy(table.column("time_ns"), -1) < 0))
    rules.append(("unknown source", _not_in(table.column("source"), tuple(schema.COUNTER_SOURCES))))
    return _apply(table, rules)
