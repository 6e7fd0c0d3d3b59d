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


@pytest.mark.parametrize("name", ["straggler", "real_ddp_straggler", "poor_overlap"])
def test_dask_plan_equals_one_process(client, name: str) -> None:
    single, _ = stream_metrics(DATA / name, window_events=1)
    got = dask_metrics(DATA / name, client, window_events=1)
    assert same_metrics(single, got) == []
    assert same_metrics(compute_metrics(load_trace(DATA / name)), got) == []
    assert got.quality["events"] == single.quality["events"] > 0
    # the work ran on the cluster's two workers, not in this process
    done = client.run(lambda dask_worker: len(dask_worker.data) + dask_worker.state.executed_count)
    assert len(done) == 2 and all(v > 0 for v in done.values())
