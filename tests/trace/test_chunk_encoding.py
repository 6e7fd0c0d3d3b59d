"""The string columns the streaming reader holds between windows: encoded from their
runs of equal values, they are what Arrow's own dictionary cast makes of them."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.trace.chunks import _CODES, _compact

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
