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
