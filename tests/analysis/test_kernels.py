"""The dense group index: the same groups as sorting, counted from each column's
smallest value, so a window late in a long run is indexed directly."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.analysis import kernels


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 30)), min_size=1, max_size=200),
    st.integers(0, 10**6),
    st.integers(-5, 10**9),
)
def test_direct_and_sorted_indices_group_alike(rows, rank_low, step_low):
    rank = np.array([r for r, _ in rows], dtype=np.int64) + rank_low
    step = np.array([s for _, s in rows], dtype=np.int64) + step_low
    direct = kernels.dense_index([rank, step], limit=10**6)
    assert direct is not None  # the range of the values, not their size, counts
    idx, size = direct
    assert size == (rank.max() - rank.min() + 1) * (step.max() - step.min() + 1)
    assert idx.min() >= 0 and idx.max() < size
    ids, _ = kernels.factorize([rank, step])
    # one group per distinct (rank, step), in the same (rank, step) order
    order_direct = np.unique(idx, return_inverse=True)[1].reshape(-1)
    assert np.array_equal(order_direct, ids)


def test_a_late_window_of_many_ranks_is_indexed_directly():
    """4,096 ranks, one step 2,400 steps into the run: 4,096 groups."""
    rank = np.repeat(np.arange(4096, dtype=np.int64), 100)
    step = np.full(len(rank), 2400, dtype=np.int64)
    direct = kernels.dense_index([rank, step], limit=4 * len(rank) + 1_000_000)
    assert direct is not None and direct[1] == 4096


def _layouts():
    """Group ids in each layout :class:`kernels.Groups` tells apart: sorted runs, one
    row of distinct ids repeated, and anything else (each with values to reduce)."""
    ids = st.integers(0, 12)
    runs = st.lists(ids, min_size=0, max_size=60).map(sorted)
    tiled = st.tuples(st.lists(ids, min_size=1, max_size=8, unique=True), st.integers(1, 6)).map(
        lambda rt: rt[0] * rt[1]
    )
    almost = tiled.map(lambda x: x[:-1] + [(x[-1] + 1) % 13] if len(x) > 1 else x)
    anything = st.lists(ids, min_size=0, max_size=60)
    return st.one_of(runs, tiled, almost, anything).flatmap(
        lambda idx: st.tuples(
            st.just(np.array(idx, dtype=np.int64)),
            st.lists(st.integers(-(10**12), 10**12), min_size=len(idx), max_size=len(idx)),
        )
    )


@settings(max_examples=400, deadline=None)
@given(_layouts())
def test_groups_reduce_as_the_scatter_does(case):
    """Whatever the layout, each reduction equals numpy's scatter over the same ids, an
    id no row has getting the empty value; the first row of each id likewise."""
    idx, values = case
    values = np.array(values, dtype=np.int64)
    size = int(idx.max()) + 3 if len(idx) else 2  # ids no row has, past the largest
    groups = kernels.Groups(idx, size)
    assert np.array_equal(groups.maximum(values), kernels.maximum(idx, values, size))
    assert np.array_equal(groups.minimum(values), kernels.minimum(idx, values, size))
    assert np.array_equal(groups.maximum(values, -7), kernels.maximum(idx, values, size, -7))
    rows = np.arange(len(idx), dtype=np.int64)
    assert np.array_equal(groups.first_row(), kernels.minimum(idx, rows, size, len(idx)))


def test_groups_find_the_layouts_of_a_window():
    """A window of 4 ranks of 3 calls each: its (rank, step) ids are runs, its
    instance ids one row repeated; shuffled, neither."""
    rank_step = np.repeat(np.arange(4), 3)
    instance = np.tile(np.array([2, 0, 1]), 4)
    assert kernels.Groups(rank_step, 4).starts is not None
    tiled = kernels.Groups(instance, 3)
    assert tiled.starts is None and np.array_equal(tiled.row, [2, 0, 1])
    mixed = kernels.Groups(np.array([0, 1, 2, 0, 2, 1]), 3)
    assert mixed.starts is None and mixed.row is None
