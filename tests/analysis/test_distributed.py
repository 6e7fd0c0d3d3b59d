"""The streaming plan on a local Dask cluster of two worker processes gives exactly
the single-process result (and the loaded one), window by window."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncpace.analysis.distributed import dask_metrics, local_client
from syncpace.analysis.metrics import compute_metrics
from syncpace.analysis.streaming import same_metrics, stream_metrics
from syncpace.trace.reader import load_trace

distributed = pytest.importorskip("distributed")

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def client():
    c = local_client(workers=2)
    try:
        yield c
    finally:
        cluster = c.cluster
        c.close()
        cluster.close()


@pytest.mark.slow  # a Dask cluster's workers read each trace: seconds
@pytest.mark.parametrize("name", ["straggler", "real_ddp_straggler", "poor_overlap"])
def test_dask_plan_equals_one_process(client, name: str) -> None:
    single, _ = stream_metrics(DATA / name, window_events=1)
    got = dask_metrics(DATA / name, client, window_events=1)
    assert same_metrics(single, got) == []
    assert same_metrics(compute_metrics(load_trace(DATA / name)), got) == []
    assert got.quality["events"] == single.quality["events"] > 0
    # the work ran on the cluster's workers, not in this process; which worker took
    # which task is the scheduler's (on a busy machine one took all five of a plan)
    done = client.run(lambda dask_worker: len(dask_worker.data) + dask_worker.state.executed_count)
    assert len(done) == 2 and sum(done.values()) > 0, done


def test_ranks_scanned_in_blocks_and_windows_run_in_order_give_the_same_result(
    client, monkeypatch
) -> None:
    import syncpace.analysis.distributed as d

    monkeypatch.setattr(d, "SCAN_BLOCK", 3)  # several blocks of ranks, one short
    single, _ = stream_metrics(DATA / "real_ddp_straggler", window_events=1)
    got = dask_metrics(DATA / "real_ddp_straggler", client, window_events=1)
    assert same_metrics(single, got) == []


def test_windows_are_cut_into_consecutive_runs_of_about_equal_length() -> None:
    from syncpace.analysis.distributed import _runs_of

    windows = [(i, i + 1) for i in range(10)]
    for count in (1, 3, 4, 10, 50):
        runs = _runs_of(windows, count)
        assert [w for run in runs for w in run] == windows  # all of them, in order
        assert len(runs) <= count and max(map(len, runs)) - min(map(len, runs)) <= 3
    assert _runs_of([], 4) == []
