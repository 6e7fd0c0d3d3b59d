"""Calibration from a bench file and from a trace recovers the parameters behind them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from syncpace.bench import results
from syncpace.sim.calibrate import calibrate, compute_end
from syncpace.sim.engine import simulate
from syncpace.sim.noise import draw
from syncpace.sim.tracewrite import write_trace
from syncpace.trace.reader import load_trace

from .conftest import config


def test_from_bench_file(tmp_path: Path) -> None:
    bench = {
        "schema": "syncpace.bench",
        "schema_version": 1,
        "world_size": 8,
        "hosts": ["h0", "h1"],
        "fits": {"all_reduce": {"op": "all_reduce", "alpha_us": 140.0, "beta_gbps": 11.5}},
    }
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    # written by hand in the bench schema this test knows: a new schema must update it
    assert (results.SCHEMA, results.SCHEMA_VERSION) == ("syncpace.bench", 1)
    cal = calibrate(tmp_path)
    assert cal.alpha_us == pytest.approx(10.0)  # 140 us over 2(n-1) = 14 ring steps
    assert cal.bandwidth_gbps == pytest.approx(11.5) and cal.across_nodes
    cfg = cal.apply(config())
    assert cfg.network.alpha_us == pytest.approx(10.0) and cfg.topology.nic_gbps == 11.5


def test_from_a_trace_recovers_compute_noise_and_slow_rank(tmp_path: Path) -> None:
    truth = config(
        noise={"jitter": 0.04, "slow_ranks": (6,), "slow_factor": 1.2},
        network={"algorithm": "ring"},
        run={"steps": 80},
    )
    cal = calibrate(write_trace(simulate(truth), tmp_path / "t"))
    wl = truth.workload
    # compute up to the last bucket's issue: forward + all of backward
    assert cal.compute_ms == pytest.approx(wl.fwd_ms + wl.bwd_ms, rel=0.03)
    assert cal.jitter == pytest.approx(0.04, rel=0.25)
    assert cal.slow_ranks == (6,)
    assert cal.bandwidth_gbps is not None and cal.bandwidth_gbps > 0
    again = cal.apply(truth)
    # measured from the trace: the rank's extra time, its own quantiles, no factor
    assert again.noise.extra_ranks == (6,) and again.noise.slow_ranks == ()


def _planted(
    out: Path,
    *,
    sequential: bool,
    comm_ms: float,
    compute_ms: float = 100.0,
    slow: dict[int, float] | None = None,
    jitter: float = 0.03,
) -> Path:
    """A trace of 4 collectives per step with a planted compute time per rank and step,
    written by the simulator's trace writer over a simulated run's shape.

    ``sequential``: compute, then blocking collectives back to back (50 µs apart).
    Otherwise DDP-like: bucket k issued at (k+1)/4 of compute, the buckets in order on
    one stream. Ranks are independent: each step starts where the rank's last ended.
    """
    result = simulate(config(workload={"model_mb": 100.0, "bucket_mb": 25.0}, run={"steps": 40}))
    iters, buckets = result.comm_s.shape
    world = result.world_size
    rng = np.random.default_rng(7)
    factor = np.ones(world)
    for rank, f in (slow or {}).items():
        factor[rank] = f
    compute = compute_ms * 1e-3 * factor[None, :] * rng.lognormal(0.0, jitter, (iters, world))
    comm, gap, opt = comm_ms * 1e-3, 50e-6, 5e-3
    start, end = np.zeros((iters, world)), np.zeros((iters, world))
    enter, exits = np.zeros((iters, buckets, world)), np.zeros((iters, buckets, world))
    t = np.zeros(world)
    for i in range(iters):
        start[i] = t
        for k in range(buckets):
            if sequential:
                enter[i, k] = t + compute[i] if k == 0 else exits[i, k - 1] + gap
                exits[i, k] = enter[i, k] + comm
            else:
                enter[i, k] = t + compute[i] * (k + 1) / buckets
                busy = exits[i, k - 1] if k else enter[i, k]
                exits[i, k] = np.maximum(enter[i, k], busy) + comm
        t = end[i] = exits[i, -1] + opt
    planted = dataclasses.replace(
        result,
        start_s=start,
        end_s=end,
        delay_s=np.zeros_like(start),
        enter_s=enter,
        exit_s=exits,
    )
    return write_trace(planted, out)


def test_a_slow_rank_gets_its_measured_factor(tmp_path: Path) -> None:
    cal = calibrate(_planted(tmp_path / "t", sequential=True, comm_ms=8.0, slow={9: 1.4}))
    assert cal.slow_ranks == (9,)
    assert cal.slow_factor == pytest.approx(1.4, rel=0.02)
    assert cal.compute_ms == pytest.approx(100.0, rel=0.02)
    assert cal.rank_spread is not None and cal.rank_spread < 0.02  # the straggler left out
    noise = cal.apply(config()).noise
    assert noise.extra_ranks == (9,) and noise.slow_ranks == ()
    # 40 ms more than the others' 100, added before its compute
    assert np.median(noise.extra_tables()[0]) == pytest.approx(40.0, rel=0.05)


def test_each_slow_rank_keeps_its_own_factor(tmp_path: Path) -> None:
    """A mildly slow rank beside a heavy straggler (as rank 0 beside the demo's rank 2):
    one mean factor would make rank 0 as slow as the mean of both."""
    cal = calibrate(_planted(tmp_path / "t", sequential=True, comm_ms=8.0, slow={0: 1.35, 2: 14.0}))
    assert cal.slow_ranks == (0, 2)
    assert cal.slow_factors == pytest.approx((1.35, 14.0), rel=0.03)
    noise = cal.apply(config()).noise
    assert noise.extra_ranks == (0, 2)
    # the extra over the others' compute (100 ms, jitter 3 %): within 3 % of that compute
    mild, heavy = np.median(noise.extra_tables(), axis=1)
    assert mild == pytest.approx(35.0, abs=3.0) and heavy == pytest.approx(1300.0, rel=0.03)
    drawn = draw(noise, iterations=200, nodes=16, gpus=1, seed=0)
    compute = cal.compute_ms * drawn.mult + drawn.stall_s * 1e3
    ratio = np.median(compute[:, [0, 2]], axis=0) / np.median(compute[:, 1])
    assert ratio == pytest.approx((1.35, 14.0), rel=0.05)


@pytest.mark.parametrize(
    ("noise", "message"),
    [
        ({"slow_ranks": (1, 2), "slow_factors": (1.5,)}, "one factor per slow rank"),
        ({"slow_ranks": (1,), "slow_factors": (0.0,)}, r"slow_factors: must be in \(0, 1000\]"),
    ],
)
def test_slow_factors_must_match_the_slow_ranks(noise, message) -> None:
    from syncpace.errors import ConfigError
    from syncpace.sim.noise import NoiseSpec

    with pytest.raises(ConfigError, match=message):
        NoiseSpec(**noise)


def test_no_slow_rank_leaves_the_default_factor(tmp_path: Path) -> None:
    cal = calibrate(_planted(tmp_path / "t", sequential=True, comm_ms=8.0))
    assert cal.slow_ranks == () and cal.slow_factor is None
    base = config(noise={"slow_nodes": (1,)})
    assert cal.apply(base).noise.slow_factor == base.noise.slow_factor == 1.15


def test_back_to_back_collectives_end_compute_at_the_first(tmp_path: Path) -> None:
    cal = calibrate(_planted(tmp_path / "t", sequential=True, comm_ms=30.0))
    # the last entry would add three collectives: 100 + 3 x 30 ms
    assert cal.compute_ms == pytest.approx(100.0, rel=0.02)
    assert "first collective's entry" in " ".join(cal.notes)


def test_unobserved_exits_are_no_evidence_of_back_to_back(tmp_path: Path) -> None:
    trace = load_trace(_planted(tmp_path / "t", sequential=True, comm_ms=30.0))
    assert compute_end(trace.events, warmup=1)[0] == "first"
    unseen = trace.events.with_columns(exit_ns=pl.lit(-1, dtype=pl.Int64))
    end, note = compute_end(unseen, warmup=1)
    assert end == "last" and "0 of" in note


@pytest.mark.parametrize("comm_ms", [40.0, 5.0])
def test_overlapped_buckets_end_compute_at_the_last(tmp_path: Path, comm_ms: float) -> None:
    """40 ms: several buckets in flight at once; 5 ms: each done before the next is
    ready, 20 ms of backward between them (not back to back)."""
    cal = calibrate(_planted(tmp_path / "t", sequential=False, comm_ms=comm_ms))
    assert cal.compute_ms == pytest.approx(100.0, rel=0.02)
    assert "last collective's entry" in " ".join(cal.notes)


def test_round_trip_of_a_simulated_straggler(tmp_path: Path) -> None:
    truth = config(
        noise={"jitter": 0.03, "slow_ranks": (5,), "slow_factor": 1.3}, run={"steps": 80}
    )
    run = simulate(truth)
    cal = calibrate(write_trace(run, tmp_path / "t"))
    wl = truth.workload
    assert cal.compute_ms == pytest.approx(wl.fwd_ms + wl.bwd_ms, rel=0.02)
    assert cal.slow_ranks == (5,)
    assert cal.slow_factor == pytest.approx(1.3, rel=0.02)
    assert cal.jitter == pytest.approx(0.03, rel=0.25)
    assert cal.rank_spread is not None and cal.rank_spread < 0.01
    again = cal.apply(config(run={"steps": 80}))
    assert again.noise.extra_ranks == (5,)
    extra = np.median(again.noise.extra_tables()[0])
    assert extra == pytest.approx(0.3 * (wl.fwd_ms + wl.bwd_ms), rel=0.05)
    # the calibrated default job runs as long as the traced one
    iteration_ms = run.summary()["iteration_ms"]
    assert simulate(again).summary()["iteration_ms"] == pytest.approx(iteration_ms, rel=0.02)


def test_a_negative_intercept_refits_through_the_origin() -> None:
    """Small collectives a little faster than the line through the big ones (a busy
    job's noise) make the free fit's intercept negative; clamping it to 0 while keeping
    the steeper slope understated the bandwidth."""
    from syncpace.sim.calibrate import _fit

    beta = 4e6  # bytes/s of bus bandwidth
    sizes = [133_120] * 10 + [1_071_144] * 40
    bus = [s * 1.5 for s in sizes]  # all_reduce over 4 ranks
    service = [b / beta * (0.5 if s < 1e6 else 1.0) for s, b in zip(sizes, bus, strict=True)]
    inst = pl.DataFrame(
        {
            "op": ["all_reduce"] * 50,
            "n": [4] * 50,
            "bytes": sizes,
            "service_ns": [int(t * 1e9) for t in service],
        }
    )
    alpha, bw = _fit(inst)
    assert alpha == 0.0
    assert bw == pytest.approx(beta / 1e9, rel=0.02)
