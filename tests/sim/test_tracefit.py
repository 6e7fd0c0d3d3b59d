"""Each estimator of the trace calibration against a synthetic trace whose truth is known.

The traces are built here, row by row, from planted per-step times: what each rank
computed, what the network took once the last rank was there, the optimizer, and (for
the blocking-call case) how long a rank was held in a broadcast by a late one. Every
expected value below is the planted one, not something the code computed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest

from syncpace.sim.calibrate import calibrate, compute_profile, compute_table
from syncpace.sim.engine import simulate
from syncpace.sim.noise import resample
from syncpace.sim.tracefit import (
    critical_path,
    exit_to_end,
    fit_latency,
    measured_iterations,
    quantiles,
    since_exit,
    steady_from,
)
from syncpace.sim.tracewrite import write_trace

from .conftest import config

MS = 1_000_000


@dataclasses.dataclass
class Planted:
    steps: pl.DataFrame
    events: pl.DataFrame
    compute: np.ndarray  # (I, R) ms, from each rank's step start to its bucket's entry
    comm: np.ndarray  # (I,) ms, from the last entry to the exit
    opt: float  # ms, exit to step end
    held: np.ndarray  # (I, R) ms a rank was held in the step's broadcast by a late one


def planted(
    steps: int = 30, world: int = 4, *, late: int = 2, late_ms: float = 80.0, broadcast=False
) -> Planted:
    """A job of ``world`` ranks: per step, optionally a blocking broadcast at the step's
    start (``wait_ns`` set; rank ``late`` enters it ``late_ms`` late and everybody waits),
    then compute, then one bucket (no ``wait_ns``: completed by callback) whose exit is
    the last entry plus the step's communication, then the optimizer. Without the
    broadcast, rank ``late`` computes ``late_ms`` more."""
    rng = np.random.default_rng(11)
    compute = 5.0 * rng.lognormal(0.0, 0.1, (steps, world))
    if not broadcast:
        compute[:, late] += late_ms
    comm = rng.uniform(8.0, 16.0, steps)
    opt = 1.5
    held = np.zeros((steps, world))
    steps_rows, ev_rows = [], []
    start = np.zeros(world)
    seq = 0
    for i in range(steps):
        t = start.copy()
        if broadcast:
            enter = t + 0.1
            enter[late] += late_ms
            out = enter.max() + 0.2
            held[i] = enter.max() - enter
            for r in range(world):
                ev_rows.append((r, i, seq, enter[r], out, enter[r]))
            seq += 1
            t = np.full(world, out)
        arrive = t + compute[i]
        exit_ = arrive.max() + comm[i]
        for r in range(world):
            ev_rows.append((r, i, seq, arrive[r], exit_, -1))
        seq += 1
        end = np.full(world, exit_ + opt)
        for r in range(world):
            steps_rows.append((r, i, start[r], end[r]))
        start = end
    ns = lambda v: int(round(v * MS)) if v >= 0 else -1  # noqa: E731
    steps_df = pl.DataFrame(
        [(r, i, ns(a), ns(b), 0) for r, i, a, b in steps_rows],
        schema=["rank", "step", "start_ns", "end_ns", "pacing_delay_ns"],
        orient="row",
    )
    events = pl.DataFrame(
        [(r, i, "0", q, ns(a), ns(b), ns(w)) for r, i, q, a, b, w in ev_rows],
        schema=["rank", "step", "group", "seq", "enter_ns", "exit_ns", "wait_ns"],
        orient="row",
    )
    # from its own start: the late rank's lead into the broadcast, the time the others
    # were held there, and the broadcast's own 0.3 ms
    if broadcast:
        lead = np.zeros(world)
        lead[late] = late_ms
        compute = compute + 0.3 + held + lead[None, :]
    return Planted(steps_df, events, compute, comm, opt, held)


def test_the_critical_path_is_read_on_the_rank_that_arrived_last() -> None:
    p = planted()
    path = critical_path(p.steps, p.events, warmup=1, end="last")
    assert path["rank"].to_list() == [2] * 29
    assert path["comm_ms"].to_numpy() == pytest.approx(p.comm[1:], abs=1e-5)
    assert path["opt_ms"].to_numpy() == pytest.approx(np.full(29, p.opt), abs=1e-5)


def test_compute_is_measured_from_the_exit_every_rank_left_with() -> None:
    """Every rank ends its step together here, so the gap from the last exit to the
    next entry is the optimizer plus that rank's compute."""
    p = planted()
    table = compute_table(p.steps, p.events, warmup=1, end="last")
    gaps = since_exit(table, p.events, p.steps).sort("step", "rank")
    expected = (p.compute[1:] + p.opt).ravel()
    assert gaps["gap_ms"].to_numpy() == pytest.approx(expected, abs=1e-5)


def test_the_time_held_in_a_blocking_call_is_not_compute() -> None:
    """Rank 2 enters every step's broadcast 80 ms late (its own time: it counts); the
    others wait in it. Their compute up to the bucket is ~5 ms plus the broadcast's own
    0.3 ms, not ~85 ms."""
    p = planted(broadcast=True)
    table = compute_table(p.steps, p.events, warmup=1, end="last").sort("step", "rank")
    truth = (p.compute - p.held)[1:].ravel()
    assert table["compute"].to_numpy() == pytest.approx(truth, abs=1e-5)
    assert table.filter(pl.col("rank") != 2)["compute"].max() < 7.0


def test_measured_iterations_are_the_boundaries_differences() -> None:
    p = planted()
    ends = p.steps.group_by("step").agg(pl.col("end_ns").max()).sort("step")["end_ns"]
    truth = np.diff(ends.to_numpy()) / 1e6  # steps 1.. between boundaries
    got = measured_iterations(p.steps, warmup=1)
    assert got[1:] == pytest.approx(truth[1:], abs=1e-5)
    assert got.mean() == pytest.approx((p.compute[1:].max(axis=1) + p.comm[1:] + p.opt).mean())


def test_cpu_contention_that_moves_every_rank_is_not_a_slow_rank() -> None:
    """Rank 0's median is 1.8x the others' but its steps overlap theirs (a loaded
    machine's contention: heavy, shared); rank 3 is slower in every step."""
    rng = np.random.default_rng(5)
    rows = []
    for r, (median, sigma) in enumerate([(9.0, 0.8), (5.0, 0.8), (5.0, 0.8), (60.0, 0.05)]):
        for i, c in enumerate(median * rng.lognormal(0.0, sigma, 60)):
            rows.append((r, i, float(c)))
    table = pl.DataFrame(rows, schema=["rank", "step", "compute"], orient="row")
    prof = compute_profile(table)
    assert prof.slow_ranks == (3,)
    # its extra over the others' compute, as measured: 60 - ~5 ms
    extra = np.asarray(prof.slow_extra_ms)
    assert np.median(extra) == pytest.approx(55.0, abs=3.0)


def test_a_measured_distribution_is_resampled_not_fitted() -> None:
    """A mixture (90 % at 5 ms, 10 % at 40 ms: a rank that is sometimes descheduled)
    comes back as such; a lognormal of its σ would put mass where there was none."""
    rng = np.random.default_rng(2)
    sample = np.where(rng.random(4000) < 0.9, 5.0, 40.0) * rng.lognormal(0, 0.02, 4000)
    table = np.asarray(quantiles(sample))
    draws = resample(np.random.default_rng(3), table, (200_000,))
    assert np.mean(draws > 20) == pytest.approx(0.10, abs=0.015)
    assert np.mean((draws > 7) & (draws < 35)) < 0.02  # the gap between the modes
    assert np.median(draws) == pytest.approx(np.median(sample), rel=0.02)


def test_alpha_is_recovered_from_the_communication_after_the_last_arrival(tmp_path) -> None:
    truth = config(
        topology={"nodes": 4, "gpus_per_node": 1, "nics_per_node": 1, "nic_gbps": 1.0},
        workload={"model_mb": 8.0, "bucket_mb": 4.0},
        network={"algorithm": "ring", "alpha_us": 300.0},
        noise={"jitter": 0.02},
        run={"steps": 40},
    )
    cal = calibrate(write_trace(simulate(truth), tmp_path / "t"))
    blind = truth.replace(network=dataclasses.replace(truth.network, alpha_us=0.0))
    fitted, note = fit_latency(blind, 4, cal.comm_ms, cal.end, across=True)
    assert fitted.network.alpha_us == pytest.approx(300.0, rel=0.05), note
    assert fitted.topology.nic_gbps == 1.0


def test_the_steady_state_starts_after_the_first_steps_own_calls() -> None:
    """Setup (step 0) is always left out; step 1 here also calls broadcasts the job
    never calls again (DDP's first steps): the steady state starts at step 2."""
    p = planted()
    extra = pl.DataFrame(
        {
            "rank": [0, 1, 2, 3],
            "step": [1] * 4,
            "group": ["0"] * 4,
            "seq": [999] * 4,
            "enter_ns": [1] * 4,
            "exit_ns": [2] * 4,
            "wait_ns": [1] * 4,
        }
    )
    events = pl.concat([p.events, extra]).with_columns(
        op=pl.when(pl.col("seq") == 999).then(pl.lit("broadcast")).otherwise(pl.lit("all_reduce")),
        bytes=pl.when(pl.col("seq") == 999).then(8).otherwise(1 << 20),
    )
    assert steady_from(events, first=0) == 2
    assert steady_from(events.filter(pl.col("seq") != 999), first=0) == 1


def test_the_time_after_the_exit_is_each_ranks_own() -> None:
    """Every rank ends 1.5 ms after the exit, but rank 3 once 31.5 ms (descheduled
    after the exit: it holds the boundary back, not the network)."""
    p = planted()
    late = (pl.col("rank") == 3) & (pl.col("step") == 5)
    steps = p.steps.with_columns(
        end_ns=pl.when(late).then(pl.col("end_ns") + 30 * MS).otherwise(pl.col("end_ns"))
    )
    post = exit_to_end(steps, p.events, warmup=1).sort("step", "rank")
    expected = np.full((29, 4), p.opt)
    expected[4, 3] += 30.0
    assert post["post_ms"].to_numpy() == pytest.approx(expected.ravel(), abs=1e-5)
