"""What the sweep works out for a group of batches at once (each batch's valid rows
and steps, each rank's run of call numbers) is what each batch or run gives alone."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.trace.read.index import NO_STEP, per_batch
from syncpace.trace.read.sweep import counting_runs

#: Batches of a group: (steps, which rows are valid) each, at least one row each.
batches = st.lists(
    st.lists(st.tuples(st.integers(0, 50), st.booleans()), min_size=1, max_size=12),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(batches)
def test_per_batch_counts_each_batch_alone(spec: list) -> None:
    step = np.array([s for b in spec for s, _ in b], dtype=np.int64)
    ok = np.array([v for b in spec for _, v in b], dtype=bool)
    sizes = [len(b) for b in spec]
    starts = np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64)
    expected = []
    for at, n in zip(starts.tolist(), sizes, strict=True):
        valid = step[at : at + n][ok[at : at + n]]
        expected.append(
            (len(valid), int(valid.min()), int(valid.max())) if len(valid) else (0, NO_STEP, -1)
        )
    assert per_batch(step, ok, starts) == expected


#: Runs of call numbers, one per rank: counting up from a start, now and then a jump.
runs = st.lists(
    st.tuples(st.integers(0, 1000), st.lists(st.sampled_from([1, 1, 1, 0, 2, -3]), max_size=10)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(runs)
def test_counting_runs_are_found_run_by_run(spec: list) -> None:
    pieces = [np.cumsum([start, *steps]).astype(np.int64) for start, steps in spec]
    seq = np.concatenate(pieces)
    bounds = [0, *np.cumsum([len(p) for p in pieces]).tolist()]
    counting, firsts, lasts = counting_runs(seq, bounds)
    assert counting == [bool(np.all(np.diff(p) == 1)) for p in pieces]
    assert firsts == [int(p[0]) for p in pieces] and lasts == [int(p[-1]) for p in pieces]


def test_an_empty_run_is_left_to_the_rank_by_rank_path() -> None:
    assert counting_runs(np.arange(4, dtype=np.int64), [0, 2, 2, 4]) is None
