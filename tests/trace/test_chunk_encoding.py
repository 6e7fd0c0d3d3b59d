"""The string columns the streaming reader holds between windows: encoded from their
runs of equal values, they are what Arrow's own dictionary cast makes of them."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.analysis.frames import ANALYSIS_COLUMNS, analysis_frame
from syncpace.trace.read.encoding import CODES, compact, string_columns
from syncpace.trace.read.held import Held, window_table

NAMES = string_columns(ANALYSIS_COLUMNS)

#: Runs of a few values (as a rank writes them), now and then a null.
runs = st.lists(
    st.tuples(st.sampled_from(["0", "1", "all_reduce", "broadcast", "", None]), st.integers(1, 40)),
    max_size=30,
)


def column(spec: list[tuple[str | None, int]]) -> pa.Array:
    return pa.array([v for v, n in spec for _ in range(n)], pa.string())


@settings(max_examples=200, deadline=None)
@given(runs, runs)
def test_runs_encode_as_the_cast_does(first: list, second: list) -> None:
    chunks = [column(first), column(second)]
    table = pa.table({"op": pa.chunked_array(chunks, pa.string())})
    got = compact(table, NAMES).column("op")
    assert got.to_pylist() == table.column("op").to_pylist()
    if got.type == CODES:  # the same codes and dictionary, chunk by chunk
        for mine, chunk in zip(got.chunks, chunks, strict=True):
            assert mine.equals(chunk.cast(CODES))


def test_many_values_keep_wider_codes() -> None:
    values = pa.array([f"group-{i}" for i in range(300)] * 3)
    got = compact(pa.table({"group": values}), NAMES).column("group")
    assert pa.types.is_int32(got.type.index_type)
    assert got.to_pylist() == values.to_pylist()


def test_alternating_values_are_hashed_row_by_row() -> None:
    values = pa.array(["all_gather", "reduce_scatter"] * 500)
    got = compact(pa.table({"op": values}), NAMES).column("op")
    assert got.type == CODES and got.chunk(0).equals(values.cast(CODES))


#: Runs of names as valid rows hold them (no nulls).
valid_runs = st.lists(
    st.tuples(st.sampled_from(["0", "1", "all_reduce", "broadcast", ""]), st.integers(1, 40)),
    min_size=1,
    max_size=30,
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(valid_runs, st.booleans(), st.integers(1, 4)), min_size=1, max_size=5))
def test_pieces_join_and_convert_to_the_strings_they_hold(specs: list) -> None:
    """A window's pieces: held groups, each encoded on its own (some with over 127
    names, so with wider codes), their rows of several windows out of window order,
    gathered into one table under one dictionary and read as polars, window after
    window (the rows still to come copied once most are read): each window's rows, in
    their order within each group, the same strings."""
    held, expected = [], {}
    rank = 0
    for spec, many, windows in specs:
        values = column(spec)
        if many:
            values = pa.concat_arrays([values, pa.array([f"g{i}" for i in range(200)])])
        n = len(values)
        window = np.arange(n, dtype=np.int64) % windows  # rows of each window interleaved
        piece = compact(
            pa.table(
                {
                    "op": values,
                    "rank": pa.array(np.full(n, rank), pa.int32()),
                    "n": pa.array(range(n), pa.int64()),
                }
            ),
            NAMES,
        )
        held.append(Held.of(piece, window, windows))
        for w in range(windows):
            rows = np.flatnonzero(window == w)
            names = values.take(rows).to_pylist()
            expected.setdefault(w, []).extend(zip(names, rows.tolist(), strict=True))
        rank += 1
    for w in range(max(expected) + 1):
        pieces = []
        for h in held:
            a, b = h.rows_of(w, w)
            if b > a:
                pieces.append((h, a, b))
            h.start = b
        held = [h.rest() for h in held]  # the rows to come copied once most are read
        if not pieces:
            assert expected[w] == []
            continue
        table = window_table(pieces)
        got = zip(table.column("op").to_pylist(), table.column("n").to_pylist(), strict=True)
        assert list(got) == expected[w]
        frame = analysis_frame(table)
        assert frame.schema["op"] == pl.String and frame.columns == ["op", "rank", "n"]
        assert frame["op"].to_list() == [v for v, _ in expected[w]]


@pytest.mark.parametrize(
    "values",
    [["ab", "", "abab"], ["a", "aa", ""], ["", "x"], ["x", ""], ["abc"] * 7, [""] * 5, ["é"] * 3],
)
def test_one_value_only_where_every_row_is_it(values: list[str]) -> None:
    """A column read as one value (its bytes the first value's repeated) only where each
    row is that value: rows of other lengths whose bytes join into the same are not."""
    array = pa.array(["pad", *values], pa.string()).slice(1)  # an offset into its buffers
    got = compact(pa.table({"op": array}), NAMES).column("op")
    assert got.to_pylist() == values
    assert got.chunk(0).equals(array.cast(CODES))


@pytest.mark.parametrize("names", [["all_reduce"], ["all_gather", "reduce_scatter"]])
def test_categoricals_of_one_name_read_as_polars_reads_them(names: list[str]) -> None:
    """A window's names as categoricals: a column whose dictionary is one name is made
    as that name repeated; it reads (values, order, type) as polars' own conversion."""
    n = 1000
    codes = pa.array(np.arange(n) % len(names), pa.int8())
    table = pa.table(
        {
            "rank": pa.array(np.arange(n), pa.int32()),
            "op": pa.DictionaryArray.from_arrays(codes, pa.array(names)),
            "status": pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(n, np.int8)), pa.array(["completed"])
            ),
        }
    )
    got = analysis_frame(table, categorical=True)
    reference = pl.from_arrow(table)
    assert got.columns == ["rank", "op", "status"]
    assert got.schema == reference.schema and got.equals(reference)
    assert got.filter(pl.col("status") == "completed").height == n
    assert got["op"].to_physical().to_list() == reference["op"].to_physical().to_list()
