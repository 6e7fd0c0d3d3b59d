"""Real gloo ranks, traced through every public API: the trace holds exactly what ran."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from multirank import run_ranks
from syncpace.trace import load_trace

WORKERS = Path(__file__).parent / "workers"
WORLD = 3
N_BYTES = 64 * 4  # known_ops.N float32 elements
SKEWS_NS = {0: 0, 1: 50_000_000, 2: -50_000_000}

# (op, bytes) of the default group's collectives in known_ops.py, in order; None where the
# size depends on pickling (the *_object collectives).
EXPECTED_DEFAULT_GROUP = [
    ("all_reduce", N_BYTES),
    ("all_reduce", N_BYTES),  # async_op=True
    ("all_gather", N_BYTES * WORLD),  # list API: gathered total
    ("all_gather", N_BYTES * WORLD),  # all_gather_into_tensor
    ("reduce_scatter", N_BYTES * WORLD),  # list API: full input
    ("reduce_scatter", N_BYTES * WORLD),  # reduce_scatter_tensor
    ("broadcast", N_BYTES),
    ("reduce", N_BYTES),
    ("gather", N_BYTES * WORLD),
    ("scatter", N_BYTES * WORLD),
    ("all_to_all", N_BYTES * WORLD),  # all_to_all_single
    ("all_to_all", N_BYTES * WORLD),  # list API
    ("all_gather", 8 * WORLD),  # all_gather_object: sizes (int64)
    ("all_gather", None),  # all_gather_object: pickled payloads
    ("broadcast", 8),  # broadcast_object_list: sizes
    ("broadcast", None),  # broadcast_object_list: payload
    ("barrier", 0),
    ("all_reduce", N_BYTES),  # functional collective
    ("barrier", 0),
]


@pytest.fixture(scope="module")
def known_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("known")
    run_ranks(
        WORKERS / "known_ops.py",
        WORLD,
        # a host sampler's setting, to see it reach the sampler through the tracer
        env={"TRACE_DIR": str(out), "SYNCPACE_COUNTERS_SLOW_INTERVAL_S": "0.25"},
        per_rank_env={r: {"SYNCPACE_CLOCK_SKEW_NS": str(s)} for r, s in SKEWS_NS.items()},
    )
    return load_trace(out)


pytestmark = pytest.mark.multirank


def test_every_rank_finished_cleanly(known_trace):
    assert known_trace.ranks == [0, 1, 2]
    assert known_trace.warnings == ()
    assert all(m["finished"] for m in known_trace.meta.values())


def test_the_host_samplers_variables_reach_it_through_the_tracer(known_trace):
    (facts,) = known_trace.hosts.values()
    assert facts["slow_interval_s"] == 0.25 and facts["interval_s"] == 0.01  # set, default
    assert facts["rank"] in known_trace.ranks and facts["finished"]
    for meta in known_trace.meta.values():  # recorded with the tracer's own settings
        config = meta["config"]
        assert (config["counters_slow_interval_s"], config["host_sampler"]) == (0.25, "thread")
        assert config["flush_interval_s"] == 0.2  # as known_ops.py attaches


@pytest.mark.parametrize("rank", range(WORLD))
def test_default_group_collectives_in_order(known_trace, rank):
    rows = (
        known_trace.events.filter((pl.col("rank") == rank) & (pl.col("group") == "0"))
        .filter(pl.col("peer") == -1)
        .sort("seq")
    )
    assert rows["seq"].to_list() == list(range(len(EXPECTED_DEFAULT_GROUP)))
    assert rows["op"].to_list() == [op for op, _ in EXPECTED_DEFAULT_GROUP]
    for (op, nbytes), got in zip(EXPECTED_DEFAULT_GROUP, rows["bytes"].to_list(), strict=True):
        if nbytes is not None:
            assert got == nbytes, op
    assert set(rows["group_size"].to_list()) == {WORLD}


def test_subgroup_only_on_its_members(known_trace):
    sub = known_trace.events.filter(pl.col("group") != "0")
    assert sorted(sub["rank"].to_list()) == [0, 1]
    assert sub["op"].to_list() == ["all_reduce", "all_reduce"]
    assert set(sub["group_size"].to_list()) == {2}
    groups = known_trace.meta[0]["groups"]
    assert groups[sub["group"][0]]["ranks"] == [0, 1]


def test_point_to_point_ring(known_trace):
    p2p = known_trace.events.filter(pl.col("op").is_in(["send", "recv"]))
    for rank in range(WORLD):
        mine = p2p.filter(pl.col("rank") == rank)
        sends = mine.filter(pl.col("op") == "send")
        recvs = mine.filter(pl.col("op") == "recv")
        assert sends["peer"].to_list() == [(rank + 1) % WORLD] * 2  # send + batch isend
        assert recvs["peer"].to_list() == [(rank - 1) % WORLD] * 2
        assert sorted(sends["seq"].to_list()) == [0, 1]
        assert set(mine["bytes"].to_list()) == {N_BYTES}


def test_sequence_numbers_match_across_ranks(known_trace):
    collectives = known_trace.events.filter(pl.col("peer") == -1)
    per_instance = collectives.group_by("group", "seq").agg(
        pl.col("op").n_unique().alias("ops"),
        pl.col("rank").n_unique().alias("ranks"),
        pl.col("group_size").first(),
    )
    assert per_instance["ops"].to_list() == [1] * per_instance.height
    assert (per_instance["ranks"] == per_instance["group_size"]).all()


def test_exit_after_enter_and_all_completed(known_trace):
    ev = known_trace.events
    assert (ev["exit_ns"] >= ev["enter_ns"]).all()
    assert (ev["exit_ns"] > 0).all()
    assert set(ev["timing"].unique().to_list()) <= {"future", "wait"}


@pytest.mark.parametrize("rank", [1, 2])
def test_clock_offsets_recovered_within_1ms(known_trace, rank):
    clock = known_trace.meta[rank]["clock"]
    assert clock["offset_ns"] == pytest.approx(-SKEWS_NS[rank], abs=1_000_000)
    assert 0 < clock["uncertainty_ns"] < 1_000_000


def test_aligned_timestamps_agree_across_ranks(known_trace):
    """The last barrier ends at the same instant everywhere: its exits agree to well
    under the 100 ms of injected skew once aligned."""
    last = known_trace.events.filter(pl.col("op") == "barrier").filter(
        pl.col("seq") == pl.col("seq").max()
    )
    assert last.height == WORLD
    spread = last["exit_ns"].max() - last["exit_ns"].min()
    # Half the smallest skew between two ranks (50 ms): an unaligned rank is out by all
    # of it, while a loaded machine delays a rank's return from the barrier by ~10 ms.
    assert spread < 25_000_000
