"""The rules' shortcut: a table whose columns' ranges show every rule kept is taken
whole, and one the shortcut passes never has a row some rule leaves out."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.analysis.frames import ANALYSIS_COLUMNS
from syncpace.trace import schema
from syncpace.trace.read.encoding import compact, string_columns
from syncpace.trace.validate.rows import (
    MAX_SPAN_NS,
    MAX_TIME_NS,
    all_events_valid,
    check_events,
    event_rules,
    events_valid,
)

pytestmark = pytest.mark.slow

WORLD = 4
NAMES = string_columns(ANALYSIS_COLUMNS)
BIG = MAX_TIME_NS


def _row(draw: st.DrawFn) -> dict:
    """A row near the rules' edges: each value in range, or just outside it."""
    enter = draw(st.sampled_from([0, 5, 1000, BIG, BIG + 1, -1]))
    return {
        "rank": draw(st.sampled_from([1, 1, 1, 2])),
        "step": draw(st.sampled_from([0, 3, -1])),
        "group": "0",
        "group_size": draw(st.sampled_from([1, WORLD, 0, WORLD + 1])),
        "seq": draw(st.sampled_from([0, 7, -1])),
        "op": draw(st.sampled_from(["all_reduce", "send", "nonsense"])),
        "bytes": draw(st.sampled_from([0, 1 << 20, -5])),
        "dtype": "float32",
        "peer": draw(st.sampled_from([-1, 0, WORLD - 1, WORLD, -2])),
        "timing": draw(st.sampled_from(["call", "wait", "made_up"])),
        "status": draw(st.sampled_from(["completed", "completed", "failed", "timed_out"])),
        "error": None,
        "enter_ns": enter,
        "exit_ns": draw(
            st.sampled_from([-1, -2, 0, enter, enter + 10, enter + MAX_SPAN_NS + 1, BIG])
        ),
        "wait_ns": draw(st.sampled_from([-1, -1, enter, enter - 1, BIG + 1])),
        "device_enter_ns": (device := draw(st.sampled_from([-1, -1, 0, enter, BIG + 1, -3]))),
        "device_exit_ns": draw(
            st.sampled_from([-1, -1, device, device + 7, device - 1, MAX_SPAN_NS + 9])
        ),
    }


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    rows = draw(st.lists(st.composite(_row)(), min_size=1, max_size=12))
    columns = {name: [r[name] for r in rows] for name in schema.EVENTS.names}
    return schema.events_table(columns)


def _flagged(table: pa.Table, rank) -> np.ndarray:
    bad = np.zeros(table.num_rows, dtype=bool)
    for _, flags in event_rules(table, rank, WORLD):
        bad |= flags
    return bad


@settings(max_examples=600, deadline=None)
@given(tables())
def test_the_shortcut_never_passes_a_row_a_rule_leaves_out(table: pa.Table) -> None:
    for t in (table, compact(table, NAMES)):  # as loaded, and with the names as codes
        if all_events_valid(t, 1, WORLD):
            assert not _flagged(t, 1).any()
        kept, bad = check_events(t, 1, WORLD)
        assert kept.num_rows == t.num_rows - int(_flagged(t, 1).sum())
        ranks = np.full(t.num_rows, 1)
        assert np.array_equal(events_valid(t, ranks, WORLD), ~_flagged(t, 1))


def test_a_clean_table_is_taken_by_its_ranges() -> None:
    """Completed calls, with and without waits recorded: the shortcut says so."""
    n = 50
    enter = np.arange(n, dtype=np.int64) * 1000
    columns = {
        "rank": [1] * n, "step": [0] * n, "group": ["0"] * n, "group_size": [WORLD] * n,
        "seq": list(range(n)), "op": ["all_reduce"] * n, "bytes": [64] * n,
        "dtype": ["float32"] * n, "peer": [-1] * n, "timing": ["wait"] * n,
        "status": ["completed"] * n, "error": [None] * n, "enter_ns": enter,
        "exit_ns": enter + 500, "wait_ns": [-1] * n,
    }  # fmt: skip
    table = schema.events_table(columns)
    assert all_events_valid(table, 1, WORLD)
    assert all_events_valid(compact(table, NAMES), np.ones(n), WORLD)
    waited = table.set_column(14, "wait_ns", pa.array(enter + 100))
    assert all_events_valid(waited, 1, WORLD)
    late = table.set_column(14, "wait_ns", pa.array(enter - 1))
    assert not all_events_valid(late, 1, WORLD)


def _clean(n: int) -> dict:
    enter = [1000 * i for i in range(n)]
    return {
        "rank": [1] * n, "step": [0] * n, "group": ["0"] * n, "group_size": [WORLD] * n,
        "seq": list(range(n)), "op": ["all_reduce"] * n, "bytes": [64] * n,
        "dtype": ["float32"] * n, "peer": [-1] * n, "timing": ["wait"] * n,
        "status": ["completed"] * n, "error": [None] * n, "enter_ns": enter,
        "exit_ns": [e + 500 for e in enter], "wait_ns": [-1] * n,
    }  # fmt: skip


#: One value each that some rule refuses (or, for status and wait, that the shortcut
#: cannot vouch for by ranges), put in one row of a clean table.
EDGES = {
    "rank": [2], "step": [-1], "group_size": [0, WORLD + 1], "seq": [-1], "op": ["nonsense"],
    "bytes": [-1], "peer": [-2, WORLD], "timing": ["made_up"],
    "status": ["failed", "pending"], "enter_ns": [-1, BIG + 1],
    "exit_ns": [-1, -2, 0, BIG + 1, 10**6 + MAX_SPAN_NS], "wait_ns": [0, BIG + 1, 10**6],
    "group": [None], "dtype": [None],
}  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 20),
    st.sampled_from([(k, v) for k, vs in EDGES.items() for v in vs]),
    st.data(),
)
def test_one_bad_value_in_a_clean_table_is_never_passed(n: int, edge: tuple, data) -> None:
    columns = _clean(n)
    row = data.draw(st.integers(0, n - 1))
    name, value = edge
    columns[name][row] = value
    table = schema.events_table(columns)
    for t in (table, compact(table, NAMES)):
        flagged = _flagged(t, 1)
        if all_events_valid(t, 1, WORLD):
            assert not flagged.any()
        assert np.array_equal(events_valid(t, np.ones(n), WORLD), ~flagged)
