"""The trace's columns are declared once (``syncpace.trace.columns``): everything that
writes them out again is derived from the declaration or checked against it here."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from syncpace.importers import tracebuild
from syncpace.trace import columns, journal, schema
from syncpace.trace.columns import EV, ST

DOC = Path(__file__).resolve().parents[2] / "docs" / "trace-format.md"

#: The journal codes of every release so far. Codes on disk never change meaning: a
#: release may add names with new codes, never renumber or reuse one.
RELEASED_OP_CODES = {
    "all_reduce": 1, "all_gather": 2, "reduce_scatter": 3, "broadcast": 4, "reduce": 5,
    "gather": 6, "scatter": 7, "all_to_all": 8, "barrier": 9, "send": 10, "recv": 11,
}  # fmt: skip
RELEASED_TIMING_CODES = {
    "wait": 1, "future": 2, "call": 3, "unobserved": 4, "cuda_event": 5, "nccl_hook": 6,
    "simulated": 7, "profiler_host": 8, "profiler_call": 9, "profiler_device": 10,
    "inspector_kernel_gpu": 11, "inspector_kernel_cpu": 12, "inspector_collective_cpu": 13,
    "inspector_unknown": 14,
}  # fmt: skip
RELEASED_STATUS_CODES = {
    "completed": 1, "failed": 2, "timed_out": 3, "aborted": 4, "unobserved": 5, "pending": 6,
}  # fmt: skip


@pytest.mark.parametrize(
    ("table", "released"),
    [
        (schema.OP_CODES, RELEASED_OP_CODES),
        (schema.TIMING_CODES, RELEASED_TIMING_CODES),
        (schema.STATUS_CODES, RELEASED_STATUS_CODES),
    ],
)
def test_journal_codes_are_append_only(table: dict[str, int], released: dict[str, int]) -> None:
    for name, code in released.items():
        assert table.get(name) == code, f"{name} was {code} in a released journal"
    assert len(set(table.values())) == len(table), "two names share a code"
    assert min(table.values()) >= 1, "code 0 means none"


def test_positions_are_the_declaration_order() -> None:
    assert columns.positions(EV) == {c.name: i for i, c in enumerate(columns.EVENT_COLUMNS)}
    assert columns.positions(ST) == {c.name: i for i, c in enumerate(columns.STEP_COLUMNS)}
    assert schema.EVENTS.names == [c.name for c in columns.EVENT_COLUMNS]
    assert schema.STEPS.names == [c.name for c in columns.STEP_COLUMNS]
    assert schema.SUMMARY.names == [c.name for c in columns.SUMMARY_COLUMNS]


def test_columns_are_only_appended_by_version() -> None:
    """A version's columns are a prefix of the next one's: older files read by order."""
    for table in (columns.EVENT_COLUMNS, columns.STEP_COLUMNS, columns.SUMMARY_COLUMNS):
        since = [c.since for c in table]
        assert since == sorted(since)
        assert max(since) <= schema.SCHEMA_VERSION
    for version in schema.READABLE_VERSIONS:
        names = schema.events_schema(version).names
        assert names == schema.EVENTS.names[: len(names)]


def _doc_table(heading: str) -> list[tuple[str, str]]:
    """(column, type) rows of the table under ``heading`` in the format doc."""
    text = DOC.read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        found = re.match(
            r"\| `([a-z_]+)`(?:, `([a-z_]+)`)? \| ([a-z0-9, ]+?)(?: or null)? \|", line
        )
        if found:
            names = [n for n in found.group(1, 2) if n]
            types = [t.strip() for t in found.group(3).split(",")]
            rows += list(zip(names, types * len(names) if len(types) == 1 else types, strict=True))
    return rows


@pytest.mark.parametrize(
    ("heading", "declared"),
    [
        ("`rank-R.events.arrow`", columns.EVENT_COLUMNS),
        ("`rank-R.steps.arrow`", columns.STEP_COLUMNS),
        ("`rank-R.summary.arrow`", columns.SUMMARY_COLUMNS),
    ],
)
def test_the_format_doc_lists_every_column_with_its_type(heading, declared) -> None:
    assert _doc_table(heading) == [(c.name, str(c.type)) for c in declared]


def _full_row(rank: int = 3) -> tuple:
    row = [None] * len(columns.EVENT_COLUMNS)
    values = {
        "rank": rank, "step": 4, "group": "7", "group_size": 2, "seq": 11,
        "op": "reduce_scatter", "bytes": 4096, "dtype": "bfloat16", "peer": -1,
        "enter_ns": 1_000, "exit_ns": 9_000, "timing": "future", "status": "failed",
        "error": "RuntimeError: boom", "wait_ns": 2_000, "device_enter_ns": 3_000,
        "device_exit_ns": 8_500,
    }  # fmt: skip
    for name, value in values.items():
        row[getattr(EV, name)] = value
    assert None not in row[: EV.error] + row[EV.error + 1 :], "a column without a test value"
    return tuple(row)


def test_every_event_column_round_trips_through_the_journal(tmp_path: Path) -> None:
    """The journal's record holds every column: a row packed and decoded is the row,
    its times shifted by the clock offset."""
    row = _full_row()
    j = journal.Journal(tmp_path / "rank-00003.journal", 3, ring_slots=8, inflight_slots=4)
    assert j.event(row)
    records, _ = j.take()
    table = journal.events_table(records, 3, j.strings, offset_ns=100)
    j.close()
    got = table.to_pylist()[0]
    times = set(schema.EVENT_TIME_COLUMNS)
    for column in columns.EVENT_COLUMNS:
        value = row[getattr(EV, column.name)]
        assert got[column.name] == (value + 100 if column.name in times else value), column.name


def test_a_step_round_trips_through_the_journal(tmp_path: Path) -> None:
    step = (3, 5, 1_000, 4_000, 250, 200, 2_500)
    j = journal.Journal(tmp_path / "rank-00003.journal", 3, ring_slots=8, inflight_slots=4)
    assert j.step(step)
    records, _ = j.take()
    table = journal.steps_table(records, 3, offset_ns=10)
    j.close()
    assert table.to_pylist() == [
        {
            "rank": 3,
            "step": 5,
            "start_ns": 1_010,
            "end_ns": 4_010,
            "pacing_delay_ns": 250,
            "device_delay_ns": 200,
            "backward_ns": 2_510,
        }
    ]
    j = journal.Journal(tmp_path / "rank-00004.journal", 4, ring_slots=8, inflight_slots=4)
    assert j.step(step[:6])  # a step row of an older length: no backward pass seen
    records, _ = j.take()
    j.close()
    assert journal.steps_table(records, 4, offset_ns=10).to_pylist()[0]["backward_ns"] == -1


def test_importers_hand_over_the_event_columns() -> None:
    names = [
        c.name
        for c in columns.EVENT_COLUMNS
        if c.name not in ("rank", "step") and not c.name.startswith("device_")
    ]
    assert list(tracebuild.INPUT_COLUMNS) == [*names, "call_ns"]


@pytest.mark.parametrize("version", [1, 2])
def test_older_steps_read_with_no_device_delay(version: int) -> None:
    written = schema.steps_schema(version)
    table = pa.table({f.name: pa.array([7], type=f.type) for f in written}, schema=written)
    table = schema.upgrade_steps(table, version)
    assert table.schema.names == schema.STEPS.names
    assert table.column("device_delay_ns").to_pylist() == [0]


@pytest.mark.parametrize("version", [1, 2])
def test_older_tables_read_as_not_observed(version: int) -> None:
    written = schema.events_schema(version)
    n = 3
    values = {f.name: pa.array(np.zeros(n), type=f.type) for f in written if f.type != pa.string()}
    values |= {f.name: pa.array(["x"] * n) for f in written if f.type == pa.string()}
    values["exit_ns"] = pa.array([-1, 5, 6], type=pa.int64())
    table = schema.upgrade_events(pa.table(values, schema=written), version)
    assert table.schema.names == schema.EVENTS.names
    assert table.column("device_enter_ns").to_pylist() == [-1] * n
    assert table.column("device_exit_ns").to_pylist() == [-1] * n
    if version == 1:
        assert table.column("status").to_pylist() == ["unobserved", "completed", "completed"]
        assert table.column("wait_ns").to_pylist() == [-1] * n


def test_a_producer_names_only_what_it_knows() -> None:
    table = schema.events_table({"rank": [0, 1], "enter_ns": [5, 6], "exit_ns": [7, None]})
    assert table.schema == schema.EVENTS
    assert table.column("exit_ns").to_pylist() == [7, -1]
    assert table.column("device_exit_ns").to_pylist() == [-1, -1]
    assert table.column("error").to_pylist() == [None, None]
