"""Calibration from a bench file and from a trace recovers the parameters behind them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncpace.sim.calibrate import calibrate
from syncpace.sim.engine import simulate
from syncpace.sim.tracewrite import write_trace

from .conftest import config


def test_from_bench_file(tmp_path: Path) -> None:
    bench = {
        "schema": "syncpace.bench", "schema_version": 1, "world_size": 8,
        "hosts": ["h0", "h1"], "fits": {"all_reduce": {"op": "all_reduce", "alpha_us": 140.0,
                                                        "beta_gbps": 11.5}},
    }  # fmt: skip
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    from syncpace.bench import results

    if results.SCHEMA != "syncpace.bench" or results.SCHEMA_VERSION != 1:
        pytest.skip("bench schema changed")
    cal = calibrate(tmp_path)
    assert cal.alpha_us == pytest.approx(10.0)  # 140 us over 2(n-1) = 14 ring steps
    assert cal.bandwidth_gbs == pytest.approx(11.5) and cal.across_nodes
    cfg = cal.apply(config())
    assert cfg.network.alpha_us == pytest.approx(10.0) and cfg.topology.nic_gbs == 11.5


def test_from_a_trace_recovers_compute_noise_and_slow_rank(tmp_path: Path) -> None:
    truth = config(noise={"jitter": 0.04, "slow_ranks": (6,), "slow_factor": 1.2},
                   network={"algorithm": "ring"}, run={"steps": 80})  # fmt: skip
    cal = calibrate(write_trace(simulate(truth), tmp_path / "t"))
    wl = truth.workload
    # compute up to the last bucket's issue: forward + all of backward
    assert cal.compute_ms == pytest.approx(wl.fwd_ms + wl.bwd_ms, rel=0.03)
    assert cal.jitter == pytest.approx(0.04, rel=0.25)
    assert cal.slow_ranks == (6,)
    assert cal.bandwidth_gbs is not None and cal.bandwidth_gbs > 0
    again = cal.apply(truth)
    assert again.noise.slow_ranks == (6,)
