"""The string columns the streaming reader holds between windows: encoded from their
runs of equal values, they are what Arrow's own dictionary cast makes of them."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.trace.chunks import _CODES, _compact, _joined, analysis_frame

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
    got = _compact(table).column("op")
    assert got.to_pylist() == table.column("op").to_pylist()
    if got.type == _CODES:  # the same codes and dictionary, chunk by chunk
        for mine, chunk in zip(got.chunks, chunks, strict=True):
            assert mine.equals(chunk.cast(_CODES))


def test_many_values_keep_wider_codes() -> None:
    values = pa.array([f"group-{i}" for i in range(300)] * 3)
    got = _compact(pa.table({"group": values})).column("group")
    assert pa.types.is_int32(got.type.index_type)
    assert got.to_pylist() == values.to_pylist()


def test_alternating_values_are_hashed_row_by_row() -> None:
    values = pa.array(["all_gather", "reduce_scatter"] * 500)
    got = _compact(pa.table({"op": values})).column("op")
    assert got.type == _CODES and got.chunk(0).equals(values.cast(_CODES))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(runs, st.booleans()), min_size=1, max_size=5))
def test_pieces_join_and_convert_to_the_strings_they_hold(specs: list) -> None:
    """A window's pieces, each encoded on its own (some with over 127 names, so with
    wider codes), joined under one dictionary and read as polars: the same strings."""
    pieces, expected = [], []
    for spec, many in specs:
        values = column(spec)
        if many:
            values = pa.concat_arrays([values, pa.array([f"g{i}" for i in range(200)])])
        n = len(values)
        piece = _compact(pa.table({"op": values, "n": pa.array(range(n), pa.int64())}))
        pieces.append(piece.slice(n // 3))  # a held group's rows from one window on
        expected.extend(values.to_pylist()[n // 3 :])
    table = _joined(pieces)
    assert table.column("op").to_pylist() == expected
    frame = analysis_frame(table)
    assert frame.schema["op"] == pl.String and frame.columns == ["op", "n"]
    assert frame["op"].to_list() == expected
