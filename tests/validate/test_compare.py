"""The validation's comparison and calibration logic on synthetic inputs (no fabric)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from syncpace.errors import ConfigError
from syncpace.sim.calibrate import Calibration
from syncpace.sim.engine import simulate
from syncpace.validate import (
    Comparison,
    Point,
    Stats,
    Thresholds,
    compare,
    compute_profile,
    stats_of,
)
from syncpace.validate.model import compute_table, sim_config, sim_stats


def test_stats_of_known_series():
    it = np.array([0.1, 0.1, 0.1, 0.3])
    s = stats_of(it, np.array([0.01, 0.02, 0.03]))
    assert s.iterations == 4
    assert s.iteration_ms == pytest.approx(150.0)
    assert s.cv == pytest.approx(np.std(it) / 0.15)
    assert s.transfer_ms == pytest.approx(20.0)
    assert 100.0 < s.p99_ms <= 300.0


def test_stats_need_two_iterations():
    with pytest.raises(ConfigError):
        stats_of(np.array([0.1]), np.array([]))


def _stats(mean: float, cv: float) -> Stats:
    return Stats(iterations=10, iteration_ms=mean, cv=cv, p99_ms=mean * 1.2, transfer_ms=10.0)


@pytest.mark.parametrize(
    ("sim_mean", "sim_cv", "mean_ok", "cv_ok"),
    [
        (104.9, 0.12, True, True),  # +4.9 %, +0.02
        (94.0, 0.10, False, True),  # −6 %
        (100.0, 0.14, True, False),  # CV +0.04
        (100.0, 0.069, True, False),  # CV −0.031
    ],
)
def test_compare_thresholds(sim_mean, sim_cv, mean_ok, cv_ok):
    c = compare("p", _stats(100.0, 0.10), _stats(sim_mean, sim_cv), Thresholds())
    assert c.mean_err == pytest.approx(sim_mean / 100.0 - 1)
    assert c.cv_err == pytest.approx(sim_cv - 0.10)
    assert (c.mean_ok, c.cv_ok, c.passed) == (mean_ok, cv_ok, mean_ok and cv_ok)
    assert c.to_json()["passed"] == c.passed


def _table(medians: list[float], jitter: float, steps: int = 200) -> pl.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for rank, med in enumerate(medians):
        start = 0
        for step in range(steps):
            compute = med * np.exp(jitter * rng.standard_normal())
            issue = start + int(compute * 1e6)
            rows.append({"rank": rank, "step": step, "start_ns": start, "issue": issue})
            start = issue + 50_000_000
    df = pl.DataFrame(rows)
    steps_df = df.select("rank", "step", "start_ns")
    events = df.select("rank", "step", pl.col("issue").alias("enter_ns"))
    return compute_table(steps_df, events, warmup=2)


def test_compute_profile_finds_the_straggler_and_its_factor():
    prof = compute_profile(_table([100.0, 100.0, 100.0, 140.0], jitter=0.05))
    assert prof.slow_ranks == (3,)
    assert prof.slow_factor == pytest.approx(1.4, rel=0.03)
    assert prof.compute_ms == pytest.approx(100.0, rel=0.02)
    assert prof.jitter == pytest.approx(0.05, rel=0.15)
    assert prof.rank_spread < 0.02


def test_calibrated_simulation_of_a_clean_star():
    """Without noise the simulated iteration is compute + buckets × ring all-reduce."""
    prof = compute_profile(_table([100.0, 100.0], jitter=0.0))
    point = Point(name="p", topology="star", ranks=2, buckets=2, bucket_bytes=1 << 20)
    cal = Calibration(source="synthetic", alpha_us=0.0, bandwidth_gbps=0.01)
    s = sim_stats(simulate(sim_config(point, cal, prof, steps=50)))
    ring_ms = 2 * (2 - 1) / 2 * (1 << 20) / 0.01e9 * 1e3  # 2(n−1)/n·S/B
    assert s.transfer_ms == pytest.approx(ring_ms, rel=0.01)
    assert s.iteration_ms == pytest.approx(100.0 + 2 * ring_ms, rel=0.01)
    assert s.cv < 0.01


@pytest.mark.parametrize(
    ("share", "flows", "expected"),
    [
        (0.0, (("h1", "h0"),), ("1->0",)),
        (0.5, (("h1", "h0"),), ("1->0@0.5150",)),
        (0.3, (("h2", "h0"), ("h3", "h1")), ("2->0@0.3090", "3->1@0.3090")),
    ],
)
def test_background_flows_map_hosts_to_nodes_and_udp_to_its_wire_share(share, flows, expected):
    point = Point(name="p", topology="leafspine", ranks=4, flows=flows, flow_share=share)
    assert point.background_flows == expected


# A greedy flow out of h1 with no congestion control recorded: loss-based by default,
# it keeps h1's 80 Mbit/s queue full, 50 ms of the rate plus the tbf bucket (5 ms of it),
# and each of the ring's 6 steps crosses it once (ring flow h1->h2).
QUEUE_MS = 6 * (50 + 5)


@pytest.mark.parametrize(
    ("share", "factor", "queue_ms"),
    [(0.0, 2.0, QUEUE_MS), (0.5, 1 / (1 - 0.5 * 1442 / 1400), 0.0)],
)
def test_a_flow_into_a_ranks_host_slows_its_simulated_transfers(share, factor, queue_ms):
    """On a 4-host star, a greedy flow h1->h0 halves the ring's rate (it shares h1's
    and h0's links with the ring) and adds its standing queue to every ring step; a UDP
    flow at 50 % leaves its wire share's rest and no queue."""
    prof = compute_profile(_table([100.0] * 4, jitter=0.0))
    cal = Calibration(source="synthetic", alpha_us=0.0, bandwidth_gbps=0.01)

    def transfer(**kw) -> float:
        point = Point(name="p", topology="star", ranks=4, **kw)
        return sim_stats(simulate(sim_config(point, cal, prof, steps=30))).transfer_ms

    flowing = transfer(flows=(("h1", "h0"),), flow_share=share)
    assert flowing == pytest.approx(factor * transfer() + queue_ms, rel=0.01)


def test_points_refuse_a_flow_share_of_the_whole_link():
    with pytest.raises(ConfigError, match="flow_share must be in"):
        Point(name="p", topology="star", ranks=2, flows=(("h1", "h0"),), flow_share=1.0)


def test_cli_refuses_unknown_points_and_short_runs(capsys):
    from syncpace.cli.main import main

    assert main(["validate", "--points", "star4,nope"]) == 2
    assert "unknown points ['nope']" in capsys.readouterr().err
    assert main(["validate", "--steps", "3"]) == 2
    assert "--steps: must be in [10, 100000], got 3" in capsys.readouterr().err


def _row(point: str, passed: bool) -> Comparison:
    sim = _stats(100.0 if passed else 120.0, 0.10)
    return compare(point, _stats(100.0, 0.10), sim, Thresholds())


def test_known_gaps_are_named_and_do_not_fail_the_grid():
    from syncpace.validate.grid import GRID, verdict

    points = {p.name: p for p in GRID}
    assert {p.name for p in GRID if p.gap} == {
        "star4-contended",
        "ls4-contended",
        "ls4-udp",
        "star8-delayed-ack",
    }
    rows = [_row("star4", True), _row("star8-delayed-ack", False), _row("ls4-udp", True)]
    code, lines = verdict(rows, points, failed_runs=0)
    assert code == 0
    assert lines[0] == "1/1 points within the thresholds"
    assert "known gap, star8-delayed-ack: fails, as known (TCP delayed ACKs" in lines[1]
    assert "known gap, ls4-udp: passes: the known gap did not show" in lines[2]
    # a point outside the gaps failing, or a run that did not run, fails the grid
    assert verdict([_row("star4", False)], points, failed_runs=0)[0] == 1
    assert verdict([_row("star4", True)], points, failed_runs=1)[0] == 1


@pytest.mark.parametrize("buckets", [1, 3])
def test_the_real_side_measures_transfers_as_the_simulator_counts_them(tmp_path, buckets):
    """One definition on both sides: the simulator's own trace, read as a real run is
    (``real_stats``: the analysis' ``service_ns``), gives back the transfer times it
    simulated (``comm_s``: each bucket from when its stream was free and every rank had
    issued it to its end), also with buckets queued behind each other."""
    from syncpace.sim.tracewrite import write_trace
    from syncpace.validate.model import real_stats

    prof = compute_profile(_table([100.0, 100.0, 100.0, 130.0], jitter=0.05))
    point = Point(name="p", topology="star", ranks=4, buckets=buckets, bucket_bytes=1 << 20)
    cal = Calibration(source="synthetic", alpha_us=20.0, bandwidth_gbps=0.01)
    result = simulate(sim_config(point, cal, prof, steps=30))
    real, _ = real_stats(write_trace(result, tmp_path / "sim"), result.config.run.warmup)
    simulated = sim_stats(result)
    ring_ms = 2 * 3 / 4 * (1 << 20) / 0.01e9 * 1e3
    assert simulated.transfer_ms == pytest.approx(ring_ms, rel=0.05)
    # the exits carry a few µs of completion jitter, nothing else differs
    assert real.transfer_ms == pytest.approx(simulated.transfer_ms, abs=0.05)
    assert real.iterations == simulated.iterations
    assert real.iteration_ms == pytest.approx(simulated.iteration_ms, rel=1e-3)
