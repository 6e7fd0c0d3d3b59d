"""Metrics on small hand-built traces whose every number is known."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.analysis import compute_metrics
from syncpace.analysis.overlap import _union_slow, union_and_tail
from syncpace.analysis.scaling import scaling_curve
from syncpace.trace import load_trace
from syncpace.trace.busbw import bus_factor as busbw_factor

MS = 1_000_000


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 8, 2 * 7 / 8),
        ("all_gather", 8, 7 / 8),
        ("reduce_scatter", 4, 3 / 4),
        ("all_to_all", 2, 1 / 2),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("send", 2, 1.0),
        ("recv", 2, 1.0),
        ("barrier", 8, None),
    ],
)
def test_busbw_factors_are_the_nccl_tests_ones(op: str, n: int, factor: float | None) -> None:
    assert busbw_factor(op, n) == factor


def _two_rank_allreduce(make_trace):
    # step 1 (step 0 is warm-up): rank 0 enters at 10 ms, rank 1 at 13 ms; both exit at
    # 17 ms. 4 MB all-reduce -> transfer 4 ms, algbw 1 GB/s, busbw x 2(2-1)/2 = 1 GB/s.
    events = {
        r: [
            (r, 0, "0", 2, 0, "all_reduce", 4_000_000, 1 * MS, 2 * MS),
            (r, 1, "0", 2, 1, "all_reduce", 4_000_000, (10 + 3 * r) * MS, 17 * MS),
        ]
        for r in (0, 1)
    }
    steps = {r: [(r, 0, 0, 5 * MS), (r, 1, 5 * MS, (18 + r) * MS)] for r in (0, 1)}
    return make_trace(events, steps)


def test_collective_instance_numbers(make_trace) -> None:
    m = compute_metrics(load_trace(_two_rank_allreduce(make_trace)))
    inst = m.instances.row(0, named=True)
    assert inst["n"] == 2 and inst["complete"]
    assert inst["skew_ns"] == 3 * MS
    assert inst["last_rank"] == 1
    assert inst["transfer_ns"] == 4 * MS
    assert inst["algbw_gbps"] == pytest.approx(1.0)
    assert inst["busbw_gbps"] == pytest.approx(1.0)
    rs = {r["rank"]: r for r in m.rank_step.to_dicts()}
    assert rs[0]["wait_ns"] == 3 * MS and rs[1]["wait_ns"] == 0
    assert rs[0]["lateness_ns"] == 0 and rs[1]["lateness_ns"] == 3 * MS
    assert m.last["last_rank"].to_list() == [1]


def test_iteration_time_is_boundary_to_boundary(make_trace) -> None:
    m = compute_metrics(load_trace(_two_rank_allreduce(make_trace)), warmup_steps=0)
    # step 0 from the earliest start (0) to the latest end (5 ms); step 1 from 5 to 19 ms
    assert m.steps["time_ns"].to_list() == [5 * MS, 14 * MS]
    assert m.iteration["max"] == 14 * MS


def test_overlap_exposed_after_last_issue(make_trace) -> None:
    # one rank, step 1: two collectives, transfer [2, 6] and [4, 9] ms, the last issued
    # at 4 ms: union 7 ms, exposed [4, 9] = 5 ms, step 10 ms
    events = {
        0: [
            (0, 0, "0", 1, 0, "all_reduce", 1000, 0, MS),
            (0, 1, "0", 1, 1, "all_reduce", 1000, 2 * MS, 6 * MS),
            (0, 1, "0", 1, 2, "all_reduce", 1000, 4 * MS, 9 * MS),
        ]
    }
    steps = {0: [(0, 0, 0, MS), (0, 1, MS, 11 * MS)]}
    m = compute_metrics(load_trace(make_trace(events, steps)))
    row = m.overlap.row(0, named=True)
    assert (row["comm_ns"], row["exposed_ns"], row["step_ns"]) == (7 * MS, 5 * MS, 10 * MS)
    assert m.comm["network_share"] == pytest.approx(0.7)
    assert m.comm["overlap_ratio"] == pytest.approx(1 - 5 / 7)


def test_send_recv_match_by_peer_pair(make_trace) -> None:
    events = {
        0: [(0, 1, "0", 2, 0, "send", 1000, 1 * MS, 3 * MS, 1)],
        1: [(1, 1, "0", 2, 0, "recv", 1000, 2 * MS, 3 * MS, 0)],
    }
    steps = {r: [(r, 0, 0, MS), (r, 1, MS, 4 * MS)] for r in (0, 1)}
    m = compute_metrics(load_trace(make_trace(events, steps)))
    assert m.instances.height == 1
    inst = m.instances.row(0, named=True)
    assert inst["n"] == 2 and inst["complete"] and inst["skew_ns"] == MS


def test_locality_tables_group_by_node_and_local_rank(fixture_copy) -> None:
    m = compute_metrics(load_trace(fixture_copy("locality_variance")))
    by_local = {r["local_rank"]: r for r in m.by_local_rank.to_dicts()}
    assert by_local[2]["ranks"] == [2, 6]
    slow = by_local[2]["lateness_p50_ns"]
    assert all(slow > 5 * r["lateness_p50_ns"] for k, r in by_local.items() if k != 2)
    assert m.by_node["node"].to_list() == ["node0", "node1"]


def test_scaling_curve_strong_and_weak() -> None:
    points = scaling_curve([("a", 8, 1.0, 0.01), ("b", 16, 0.6, 0.02), ("c", 32, 1.25, 0.05)])
    b, c = points[1], points[2]
    assert b.strong_speedup == pytest.approx(1 / 0.6)
    assert b.strong_efficiency == pytest.approx(1 / 0.6 / 2)
    assert c.weak_efficiency == pytest.approx(0.8)
    assert c.weak_speedup == pytest.approx(4 * 0.8)


intervals = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 1000), st.integers(0, 300)), min_size=1, max_size=40
)


@settings(max_examples=200, deadline=None)
@given(intervals, st.integers(0, 1300))
def test_union_sweep_matches_a_brute_force_union(rows, tail) -> None:
    rows = sorted(rows)
    rs = np.array([r for r, _, _ in rows], dtype=np.int64)
    t0 = np.array([s for _, s, _ in rows], dtype=np.int64)
    t1 = t0 + np.array([d for _, _, d in rows], dtype=np.int64)
    first = np.flatnonzero(np.r_[True, rs[1:] != rs[:-1]])
    tails = np.full(len(first), tail, dtype=np.int64)
    comm, exposed = union_and_tail(first, t0, t1, tails)
    slow = _union_slow(first, t0, t1, tails)
    for g, group in enumerate(rs[first].tolist()):
        covered = set()
        for r, a, b in zip(rs, t0, t1, strict=True):
            if r == group:
                covered |= set(range(a, b))
        assert comm[g] == slow[0][g] == len(covered)
        assert exposed[g] == slow[1][g] == len({x for x in covered if x >= tail})
