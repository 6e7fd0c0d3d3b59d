"""The columns of the trace's tables, declared once.

Every table of a run directory (events, steps, per-step summaries) is a tuple of
:class:`Column` here: name, Arrow type, unit, one line of meaning, the schema version
that added it and what rows of an older version read as. Everything else is derived
from these tuples or checked against them by a test: the Arrow schemas
(:mod:`syncpace.trace.schema`), the positions of the in-job row tuples (:class:`EV`,
:class:`ST`), the crash journal's record, the importers' input columns, the
simulator's writer and the tables of ``docs/trace-format.md``.

Adding a column: append it to its tuple with ``since`` the new ``SCHEMA_VERSION``
and the ``fill`` older files read as; a new last position in :class:`EV` or
:class:`ST`; a field of the journal's record when the tracer writes it. Columns are
only ever appended: readers of older files rely on the order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a trace table."""

    name: str
    type: pa.DataType
    #: ``ns`` (a time on rank 0's clock, ``-1`` when not observed), ``ns_span`` (a
    #: duration), ``bytes``, ``count``, ``rank``, ``index``, ``name``, ``text``
    unit: str
    doc: str
    #: The schema version that added the column; files of older versions lack it.
    since: int = 1
    #: What a row of a file older than ``since`` reads as, and a null a producer hands
    #: over (None: null). A time's is -1: not observed.
    fill: Any = None


EVENT_COLUMNS: tuple[Column, ...] = (
    Column("rank", pa.int32(), "rank", "global rank that issued the call"),
    Column("step", pa.int64(), "index", "iteration index at the call, from 0"),
    Column("group", pa.string(), "name", "process-group name; its ranks are in the metadata"),
    Column("group_size", pa.int32(), "count", "ranks in that group"),
    Column("seq", pa.int64(), "index", "per-group sequence number: one call across ranks"),
    Column("op", pa.string(), "name", "canonical op (schema.OPS)"),
    Column("bytes", pa.int64(), "bytes", "message size as nccl-tests counts it"),
    Column("dtype", pa.string(), "name", "element type of the first tensor"),
    Column("peer", pa.int32(), "rank", "other side of a send/recv, -1 otherwise"),
    Column("enter_ns", pa.int64(), "ns", "host: when the call was issued", 1, -1),
    Column("exit_ns", pa.int64(), "ns", "host: when the work's completion was observed", 1, -1),
    Column("timing", pa.string(), "name", "how exit_ns was observed (schema.TIMING_SOURCES)"),
    Column("status", pa.string(), "name", "what became of the call", 2, "completed"),
    Column("error", pa.string(), "text", "the error of a call that did not complete", 2),
    Column("wait_ns", pa.int64(), "ns", "host: when the caller began to wait, -1 if never", 2, -1),
    Column("device_enter_ns", pa.int64(), "ns", "device: when its stream reached the call", 3, -1),
    Column("device_exit_ns", pa.int64(), "ns", "device: when the call's work finished", 3, -1),
)

STEP_COLUMNS: tuple[Column, ...] = (
    Column("rank", pa.int32(), "rank", "global rank"),
    Column("step", pa.int64(), "index", "iteration index, from 0"),
    Column("start_ns", pa.int64(), "ns", "end of the previous iteration", 1, -1),
    Column("end_ns", pa.int64(), "ns", "the iteration boundary", 1, -1),
    Column("pacing_delay_ns", pa.int64(), "ns_span", "delay the pacer injected this iteration"),
    Column("device_delay_ns", pa.int64(), "ns_span", "the part placed on the device", 3, 0),
    Column("backward_ns", pa.int64(), "ns", "host: when its first backward pass began", 4, -1),
)

SUMMARY_COLUMNS: tuple[Column, ...] = (
    Column("rank", pa.int32(), "rank", "global rank"),
    Column("step", pa.int64(), "index", "iteration index, from 0"),
    Column("calls", pa.int32(), "count", "calls of the step"),
    Column("bytes", pa.int64(), "bytes", "bytes of the step's calls"),
    Column("comm_ns", pa.int64(), "ns_span", "sum of the calls' durations (enter to exit)"),
    Column("blocked_ns", pa.int64(), "ns_span", "sum of the time callers waited on the work"),
    Column("longest_ns", pa.int64(), "ns_span", "the longest call of the step"),
    Column("failed", pa.int32(), "count", "calls that did not complete"),
)


class EV:
    """Positions in the in-job event row (``EVENT_COLUMNS`` order): ``row[EV.group]``.

    The tracer builds a call's row up to ``enter_ns`` when it is issued and appends the
    rest when its completion is recorded."""

    rank = 0
    step = 1
    group = 2
    group_size = 3
    seq = 4
    op = 5
    bytes = 6
    dtype = 7
    peer = 8
    enter_ns = 9
    exit_ns = 10
    timing = 11
    status = 12
    error = 13
    wait_ns = 14
    device_enter_ns = 15
    device_exit_ns = 16


class ST:
    """Positions in the in-job step row (``STEP_COLUMNS`` order)."""

    rank = 0
    step = 1
    start_ns = 2
    end_ns = 3
    pacing_delay_ns = 4
    device_delay_ns = 5
    backward_ns = 6


#: Length of an event row as a call is issued (through ``enter_ns``).
ENTERED = EV.enter_ns + 1
_EVENT_FILLS = tuple(c.fill for c in EVENT_COLUMNS)


_STEP_FILLS = tuple(c.fill for c in STEP_COLUMNS)


def complete_step(row: tuple) -> tuple:
    """A step row of an older version's length, completed like :func:`complete_event`."""
    return row if len(row) >= len(_STEP_FILLS) else row + _STEP_FILLS[len(row) :]


def complete_event(row: tuple) -> tuple:
    """An event row that stops at an older version's last column, completed with the
    fills of the columns it lacks (the device times -1), as an older file reads."""
    return row if len(row) >= len(_EVENT_FILLS) else row + _EVENT_FILLS[len(row) :]


def positions(holder: type) -> dict[str, int]:
    """The positions a class such as :class:`EV` declares, by name."""
    return {k: v for k, v in vars(holder).items() if isinstance(v, int) and not k.startswith("_")}


def _check(holder: type, columns: tuple[Column, ...]) -> None:
    expected = {c.name: i for i, c in enumerate(columns)}
    if positions(holder) != expected:
        raise AssertionError(f"{holder.__name__} does not match its columns: {expected}")


_check(EV, EVENT_COLUMNS)
_check(ST, STEP_COLUMNS)


def arrow_schema(columns: tuple[Column, ...], table: str, version: int, name: str) -> pa.Schema:
    """The Arrow schema of ``columns`` as files of ``version`` hold them."""
    return pa.schema(
        [(c.name, c.type) for c in columns if c.since <= version],
        metadata={"schema": name, "schema_version": str(version), "table": table},
    )


def time_columns(columns: tuple[Column, ...]) -> tuple[str, ...]:
    """The columns holding times on a clock (aligned to rank 0's when written)."""
    return tuple(c.name for c in columns if c.unit == "ns" and c.name.endswith("_ns"))


def conform(values: Any, columns: tuple[Column, ...], arrow_schema: pa.Schema) -> pa.Table:
    """A table of ``arrow_schema`` from named columns: a ``pa.Table`` or a mapping of
    name to array or sequence, in any order, extra names ignored. A column of the
    declaration not given reads as its ``fill`` (the device times -1, an error null),
    as an older file's rows do; so a producer names only what it knows."""
    names = set(values.column_names if isinstance(values, pa.Table) else values)
    given = [c for c in columns if c.name in names]
    if not given:
        raise ValueError("no column of the table was given")

    def column(name: str) -> Any:
        return values.column(name) if isinstance(values, pa.Table) else values[name]

    n = len(column(given[0].name))
    arrays = []
    for c in columns:
        if c.name in names:
            data = column(c.name)
            array = data if isinstance(data, (pa.Array, pa.ChunkedArray)) else pa.array(data)
            array = array.cast(c.type)
            if c.fill is not None and array.null_count:  # null: not observed
                array = array.fill_null(c.fill)
            arrays.append(array)
        elif c.fill is None:
            arrays.append(pa.nulls(n, c.type))
        else:
            arrays.append(pa.array(np.full(n, c.fill), type=c.type))
    return pa.Table.from_arrays(arrays, schema=arrow_schema)
