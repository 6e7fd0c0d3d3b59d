"""A slow rank's phases of one step are replayed together: a trace whose straggler is
sometimes held back through a whole step (its compute, the communication after it and
its optimizer all long in the same step) is given back with its measured CV.

The traces are planted by hand on a simulated run's shape (4 ranks of 1 GPU, the
demo's): the truth is the planted times, not the model. Drawn apart, the phases lose
their covariance and the replay's CV comes out far too low (0.05–0.1 under the trace's).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from syncpace.sim.calibrate import calibrate
from syncpace.sim.check import CV_TOLERANCE, MEAN_TOLERANCE, replay_check
from syncpace.sim.engine import simulate
from syncpace.sim.noise import NoiseSpec, draw, quantile_at
from syncpace.sim.tracewrite import write_trace

from .conftest import config

SLOW = 2


def _shape():
    return config(
        topology={"nodes": 4, "gpus_per_node": 1, "nics_per_node": 1, "nic_gbps": 1.0},
        workload={"fwd_ms": 2.0, "bwd_ms": 4.0, "opt_ms": 1.0, "model_mb": 1.14},
        network={"algorithm": "ring", "alpha_us": 150.0},
        run={"steps": 200, "warmup": 1},
    )


def _planted(out: Path, *, held: float, seed: int, together: bool = True) -> Path:
    """Rank ``SLOW`` computes 80 ms a step, the others 6 (3 % jitter); with probability
    ``held`` a step of the slow rank is held back: +60 ms of compute, +40 ms of
    optimizer and, with ``together``, +30 ms of communication after it (the host busy
    for the whole step). Each rank starts a step where it ended the last; the buckets
    run one after another once every rank has issued them."""
    result = simulate(_shape())
    iters, buckets = result.comm_s.shape
    world = result.world_size
    rng = np.random.default_rng(seed)
    state = rng.random(iters) < held
    compute = 6e-3 * rng.lognormal(0.0, 0.03, (iters, world))
    compute[:, SLOW] = 80e-3 + 60e-3 * state + rng.normal(0.0, 1e-3, iters)
    comm = 10e-3 + 30e-3 * (state if together else rng.random(iters) < held)
    opt = np.full((iters, world), 1e-3)
    opt[:, SLOW] += 40e-3 * state
    start, end = np.zeros((iters, world)), np.zeros((iters, world))
    enter, exits = np.zeros((iters, buckets, world)), np.zeros((iters, buckets, world))
    t = np.zeros(world)
    for i in range(iters):
        start[i] = t
        free = 0.0
        for k in range(buckets):
            enter[i, k] = t + compute[i] * (k + 1) / buckets
            free = max(float(enter[i, k].max()), free) + comm[i] / buckets
            exits[i, k] = free
        t = end[i] = exits[i, -1] + opt[i]
    planted = dataclasses.replace(
        result, start_s=start, end_s=end, delay_s=np.zeros_like(start), enter_s=enter, exit_s=exits
    )
    return write_trace(planted, out)


@pytest.mark.parametrize(("held", "seed"), [(0.1, 1), (0.2, 2), (0.35, 3)])
def test_a_straggler_held_through_whole_steps_is_replayed_with_its_cv(
    tmp_path: Path, held: float, seed: int
) -> None:
    cal = calibrate(_planted(tmp_path / "t", held=held, seed=seed))
    assert cal.slow_ranks == (SLOW,)
    assert cal.measured_cv is not None and cal.measured_cv > 0.1  # the planted spread
    check = replay_check(cal.apply(_shape()), cal)
    assert abs(check.mean_error) <= MEAN_TOLERANCE, check.line()
    assert abs(check.cv_error) <= CV_TOLERANCE, check.line()
    assert check.passed


def test_phases_held_apart_are_replayed_too(tmp_path: Path) -> None:
    """Communication slow on its own steps, not the straggler's: drawing the straggler's
    steps whole must not put a covariance there that the trace does not have."""
    cal = calibrate(_planted(tmp_path / "t", held=0.2, seed=4, together=False))
    check = replay_check(cal.apply(_shape()), cal)
    assert abs(check.cv_error) <= CV_TOLERANCE, check.line()
    assert abs(check.mean_error) <= MEAN_TOLERANCE, check.line()


def test_a_slow_ranks_measured_steps_are_drawn_whole(tmp_path: Path) -> None:
    """The calibration keeps the straggler's steps as rows (extra time, optimizer beyond
    the modelled one, where the communication stood in its spread), and every draw
    takes one row whole."""
    cal = calibrate(_planted(tmp_path / "t", held=0.3, seed=5))
    cfg = cal.apply(_shape())
    noise = cfg.noise
    rows = noise.step_tables()[0]
    assert rows.shape == (199, 3)  # every steady step of the slow rank, once
    held = rows[:, 0] > 104.0  # 80 ms beyond the others' 6, +60 when held
    assert 0.15 < held.mean() < 0.45
    # the optimizer: 41 ms in a held step, 1 ms (the modelled one) otherwise
    assert cfg.workload.opt_ms == pytest.approx(1.0, abs=0.05)
    assert np.median(rows[held, 1]) == pytest.approx(40.0, abs=1.0)
    assert np.median(rows[~held, 1]) == pytest.approx(0.0, abs=0.5)
    # the communication after its arrival: 40 ms against a median of 10, read back
    # through the network's spread
    spread = quantile_at(np.asarray(cfg.network.service_quantiles), rows[:, 2])
    assert np.median(spread[held]) == pytest.approx(4.0, rel=0.05)
    assert np.median(spread[~held]) == pytest.approx(1.0, rel=0.05)
    drawn = draw(noise, iterations=2000, nodes=4, gpus=1, seed=0)
    assert drawn.post_s is not None and drawn.service_p is not None
    extra, opt = drawn.stall_s[:, SLOW] * 1e3, drawn.post_s[:, SLOW] * 1e3
    pairs = {(round(e, 6), round(o, 6)) for e, o in zip(extra, opt, strict=True)}
    measured = {(round(e, 6), round(o, 6)) for e, o in rows[:, :2]}
    assert pairs == measured  # every step, never one's extra time with another's optimizer
    assert np.corrcoef(extra, opt)[0, 1] > 0.9
    # the other ranks keep their own draws and the network's spread
    assert np.isnan(drawn.service_p[:, [0, 1, 3]]).all()
    assert np.isfinite(drawn.service_p[:, SLOW]).all()


def test_whole_steps_need_one_table_of_rows_per_extra_rank() -> None:
    from syncpace.errors import ConfigError

    with pytest.raises(ConfigError, match="extra_steps needs"):
        NoiseSpec(extra_ranks=(1, 2), extra_ms=(1.0, 2.0), extra_steps=(1.0, 2.0, 0.5))


@pytest.mark.parametrize(
    ("row", "message"),
    [((-1.0, 0.0, 0.5), "an extra time below 0"), ((1.0, 0.0, 1.5), "probability outside")],
)
def test_whole_steps_are_checked(row: tuple[float, ...], message: str) -> None:
    from syncpace.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        NoiseSpec(extra_ranks=(1,), extra_ms=(1.0, 2.0), extra_steps=(1.0, 0.0, -1.0, *row))
