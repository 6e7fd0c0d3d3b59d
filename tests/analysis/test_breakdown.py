"""The per-operation table and the per-rank / per-step breakdown, against a run whose
every duration was chosen by hand (tests/known_run.py): the truths are arithmetic on
those durations, done here."""

from __future__ import annotations

import numpy as np
import pytest

import known_run as k
from syncpace.analysis import breakdown
from syncpace.analysis.metrics import compute_metrics
from syncpace.trace.busbw import bus_factor
from syncpace.trace.reader import load_trace

WARMUP = 1
ANALYSED = range(WARMUP, k.STEPS)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return load_trace(k.write(tmp_path_factory.mktemp("known")))


@pytest.fixture(scope="module")
def metrics(run):
    return compute_metrics(run, warmup_steps=WARMUP)


def test_one_row_per_op_and_size_class_with_the_planted_times(metrics):
    table = {(r["op"], r["size_class"]): r for r in metrics.breakdown.operations.to_dicts()}
    assert set(table) == {("all_reduce", "1–16 MiB"), ("broadcast", "< 64 KiB")}
    times = np.array([k.TRANSFER_MS[s] for s in ANALYSED])
    ar = table[("all_reduce", "1–16 MiB")]
    assert ar["calls"] == len(ANALYSED)
    assert ar["total_ms"] == pytest.approx(times.sum())
    assert ar["mean_ms"] == pytest.approx(times.mean())
    assert ar["median_ms"] == pytest.approx(np.median(times))
    assert ar["p99_ms"] == pytest.approx(np.percentile(times, 99))
    busbw = np.median(k.ALLREDUCE_BYTES / (times / 1e3)) * 2 * (k.WORLD - 1) / k.WORLD
    assert ar["busbw_median_bytes_per_s"] == pytest.approx(busbw, rel=1e-6)
    bc = table[("broadcast", "< 64 KiB")]
    assert bc["calls"] == len(ANALYSED)
    assert bc["median_ms"] == pytest.approx(k.BCAST_MS)
    assert bc["busbw_median_bytes_per_s"] == pytest.approx(
        k.BCAST_BYTES / (k.BCAST_MS / 1e3) * bus_factor("broadcast", k.WORLD), rel=1e-6
    )
    # the largest total first, shares of the collectives' time
    assert [r["op"] for r in metrics.breakdown.operations.to_dicts()] == ["all_reduce", "broadcast"]
    total = times.sum() + k.BCAST_MS * len(ANALYSED)
    assert ar["share_of_time"] == pytest.approx(times.sum() / total)


def test_each_ranks_run_splits_into_compute_exposed_and_wait(metrics):
    ranks = {r["rank"]: r for r in metrics.breakdown.ranks.to_dicts()}
    assert sorted(ranks) == list(range(k.WORLD))
    run_ms = k.STEP_MS * len(ANALYSED)
    exposed = sum(k.TRANSFER_MS[s] for s in ANALYSED)
    for rank, compute_until in enumerate(k.COMPUTE_MS):
        row = ranks[rank]
        wait = (k.LAST_ARRIVAL_MS - compute_until) * len(ANALYSED)
        assert row["steps"] == len(ANALYSED)
        assert row["run_ms"] == pytest.approx(run_ms)
        assert row["wait_ms"] == pytest.approx(wait)
        assert row["exposed_ms"] == pytest.approx(exposed)
        assert row["compute_ms"] == pytest.approx(run_ms - wait - exposed)
        assert row["wait_share"] == pytest.approx(wait / run_ms)
        assert row["sum_of_shares"] == pytest.approx(1.0, abs=1e-12)
        assert row["steps_cut"] == 0
    assert metrics.breakdown.shares_add_up


def test_per_step_parts_are_the_ranks_mean_and_stack_to_the_step(metrics):
    steps = metrics.breakdown.steps.to_dicts()
    assert [s["step"] for s in steps] == list(ANALYSED)
    mean_wait = np.mean([k.LAST_ARRIVAL_MS - c for c in k.COMPUTE_MS])
    for s in steps:
        assert s["step_ms"] == pytest.approx(k.STEP_MS)
        assert s["exposed_ms"] == pytest.approx(k.TRANSFER_MS[s["step"]])
        assert s["wait_ms"] == pytest.approx(mean_wait)
        assert s["compute_ms"] + s["exposed_ms"] + s["wait_ms"] == pytest.approx(s["step_ms"])


def test_trace_alone_gives_the_same_breakdown_as_the_analysis(run, metrics):
    alone = breakdown.of_trace(run, warmup_steps=WARMUP)
    assert alone.to_json() == metrics.breakdown.to_json()


def test_the_json_view_is_in_the_summary_with_units_in_its_keys(metrics):
    view = metrics.summary()["breakdown"]
    assert view["shares_add_up"] is True
    assert {"total_ms", "p99_ms", "busbw_median_bytes_per_s"} <= set(view["operations"][0])
    assert {"compute_share", "exposed_share", "wait_share", "sum_of_shares"} <= set(
        view["ranks"][0]
    )


def test_a_wait_that_would_overrun_the_step_is_cut_and_counted():
    import polars as pl

    ovl = pl.DataFrame(
        {"rank": [0], "step": [0], "step_ns": [10], "comm_ns": [6], "exposed_ns": [6]}
    )
    arrivals = pl.DataFrame({"rank": [0], "step": [0], "wait_ns": [7]})
    parts = breakdown.step_parts(ovl, arrivals).to_dicts()[0]
    assert (parts["compute_ns"], parts["exposed_ns"], parts["wait_ns"], parts["cut"]) == (
        0,
        6,
        4,
        True,
    )
    row = breakdown.rank_table(breakdown.step_parts(ovl, arrivals)).to_dicts()[0]
    assert row["steps_cut"] == 1 and row["sum_of_shares"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("nbytes", "label"),
    [(0, "< 64 KiB"), ((64 << 10) - 1, "< 64 KiB"), (64 << 10, "64 KiB–1 MiB"),
     (1 << 20, "1–16 MiB"), (300 << 20, "≥ 256 MiB")],
)  # fmt: skip
def test_size_classes_are_a_factor_of_16_apart(nbytes, label):
    assert breakdown.size_class(nbytes) == label
