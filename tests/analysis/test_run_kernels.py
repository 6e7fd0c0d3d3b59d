"""The run kernels the replay's program is built with, against polars' own window
functions over the same groups (what they replace)."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.analysis import kernels

rows = st.lists(
    st.tuples(
        st.integers(0, 3),  # rank (rows sorted by it)
        st.integers(0, 3),  # step (not sorted: a late wait of an earlier step)
        st.booleans(),  # a JOIN (continues the run) or not
        st.one_of(st.none(), st.floats(-1e6, 1e6), st.just(float("-inf"))),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(rows)
def test_runs_equal_polars_window_functions(data: list) -> None:
    data = sorted(data, key=lambda r: r[0])  # stable: the rest stays in its order
    frame = pl.DataFrame(
        data,
        schema={"rank": pl.Int64, "step": pl.Int64, "join": pl.Boolean, "v": pl.Float64},
        orient="row",
    )
    want = frame.with_columns(
        run=(~pl.col("join")).cast(pl.Int64).cum_sum().over("rank"),
    ).with_columns(
        ret=pl.col("v").cum_max().over("rank", "run"),
        position=pl.int_range(pl.len()).over("rank", "step"),
        posts=(~pl.col("join")).cast(pl.Int64).cum_sum().over("rank", "step"),
    )
    rank, step = frame["rank"].to_numpy(), frame["step"].to_numpy()
    join = frame["join"].to_numpy()
    start = kernels.run_starts(rank)
    ret = kernels.run_cummax(frame["v"].to_numpy(), start | ~join)
    assert pl.Series(ret, nan_to_null=True).to_list() == want["ret"].to_list()
    position, order = kernels.grouped_position(rank, step)
    assert position.tolist() == want["position"].to_list()
    posts = np.empty(len(order), dtype=np.int64)
    posts[order] = kernels.run_cumsum((~join).astype(np.int64)[order], position[order] == 0)
    assert posts.tolist() == want["posts"].to_list()
