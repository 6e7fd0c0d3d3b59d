"""The host that issues the work: run-ahead, host-bound ranks, where the pacer's delay goes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from syncpace.control.pacer import Pacer
from syncpace.errors import ConfigError
from syncpace.sim import engine
from syncpace.sim.engine import simulate
from syncpace.sim.host import delay_shift
from syncpace.sim.study import run_study
from syncpace.sim.tracewrite import T0_NS, write_trace
from syncpace.sim.workload import WorkloadSpec
from syncpace.trace.reader import load_trace

from .conftest import config

# A paced, noisy run of 16 ranks, and what the engine gave for it before it modelled a host
# (commit a53f114): the sums of its device times, delays and paced steps.
BEFORE = {
    "end_s": 7064.169689912639,
    "delay_s": 9.316683681619441,
    "enter_s": 27907.63651386091,
    "exit_s": 28025.329867302586,
    "comm_s": 0.5294591999999999,
    "paced_steps": 56,
}


def noisy_paced(**workload: object):
    return config(
        noise={"jitter": 0.05, "rank_spread": 0.1, "os_burst_prob": 0.02, "loader_prob": 0.02},
        network={"background_load": 0.1, "background_duty": 0.3},
        interference={"mode": "spin", "slowdown": 0.6},
        pacing={"strategy": "early", "ab": False},
        workload=workload,
        run={"steps": 60, "warmup": 10, "seed": 11},
    )


def test_a_host_that_never_limits_gives_the_engine_before_the_host() -> None:
    result = simulate(noisy_paced())
    for name in ("end_s", "delay_s", "enter_s", "exit_s", "comm_s"):
        assert float(getattr(result, name).sum()) == pytest.approx(BEFORE[name], rel=1e-9), name
    assert int(result.pacing_active.sum()) == BEFORE["paced_steps"]


@pytest.mark.parametrize(
    "workload",
    [
        {"run_ahead_steps": 0},  # the edge: the host waits for every step
        {"run_ahead_steps": 7, "host_jitter": 0.5},  # jitter of a zero time: nothing
    ],
)
def test_a_host_that_takes_no_time_changes_nothing(workload) -> None:
    before, now = simulate(noisy_paced()), simulate(noisy_paced(**workload))
    for name in ("start_s", "end_s", "delay_s", "enter_s", "exit_s", "comm_s", "pacing_active"):
        assert np.array_equal(getattr(before, name), getattr(now, name)), name


def test_a_host_ahead_of_its_device_only_delays_the_first_step() -> None:
    # the device waits 10 ms for the first step to be issued, never again: the same run,
    # 10 ms later (unpaced: the pacer would see a first step 10 ms longer)
    cfg = noisy_paced()
    cfg = cfg.replace(pacing=config().pacing)
    before = simulate(cfg)
    now = simulate(cfg.replace(workload=WorkloadSpec(host_ms=10.0)))
    for name in ("end_s", "enter_s", "exit_s"):
        assert np.allclose(getattr(now, name) - 0.010, getattr(before, name), rtol=0, atol=1e-9)


def test_a_host_bound_rank_makes_the_device_wait() -> None:
    cfg = config(
        workload={"host_ms": 20.0, "host_ranks": [5], "host_rank_ms": [400.0]},
        noise={"jitter": 0.02},
        run={"steps": 60, "warmup": 10},
    )
    result = simulate(cfg)
    ahead = result.run_ahead_s[10:] * 1e3  # ms, device begin minus host issue of the step
    assert result.summary()["iteration_ms"] == pytest.approx(400.0, rel=1e-3)  # its host's pace
    assert ahead[:, 5].max() == 0.0  # its device begins each step when its host issued it
    others = np.delete(ahead, 5, axis=1)
    assert others.min() > 700.0  # the others' hosts run two steps (800 ms) ahead
    # per call (the trace's device_enter_ns - enter_ns) it still has the smallest lead,
    # though not 0: its device begins once the whole step is issued
    calls = (result.enter_s - result.host_calls_s()[0])[10:]
    assert calls[:, :, 5].max() < np.delete(calls, 5, axis=2).min()


def test_run_ahead_steps_zero_takes_turns_with_the_device() -> None:
    def iteration(host_ms: float, steps_ahead: int) -> float:
        cfg = config(
            workload={"host_ms": host_ms, "run_ahead_steps": steps_ahead},
            noise={"jitter": 0.0},
            run={"steps": 30, "warmup": 5},
        )
        return simulate(cfg).summary()["iteration_ms"]

    device = iteration(0.0, 2)
    # (within the µs of completion jitter)
    assert iteration(100.0, 2) == pytest.approx(device, rel=1e-6)  # hidden behind the device
    assert iteration(100.0, 0) == pytest.approx(device + 100.0, rel=1e-6)  # syncs every step
    assert iteration(300.0, 2) == pytest.approx(300.0, rel=1e-6)  # the host sets the pace


STEP, DELAY = 20, 0.3


class OneDelay:
    """A pacer that delays rank 0 by ``DELAY`` at step ``STEP`` and never else."""

    guard = None

    def __init__(self, _config: object, world: int) -> None:
        self.world = world

    def delays_for(self, step: int) -> tuple[np.ndarray, None]:
        delays = np.zeros(self.world)
        delays[0] = DELAY if step == STEP else 0.0
        return delays, None

    def observe(self, *_args: object) -> None:
        return None


def arrival_shift(monkeypatch, host_ms: float, pacing_on: str) -> tuple[float, float]:
    """How far rank 0's device arrival at step ``STEP``'s first collective moves with the
    delay placed ``pacing_on``, and the time its device waited for its host then."""
    monkeypatch.setattr(engine, "Pacer", OneDelay)
    base = config(workload={"host_ms": host_ms}, noise={"jitter": 0.0}, run={"steps": 30})
    plain = simulate(base)
    paced = simulate(
        base.replace(
            pacing=config(pacing={"strategy": "early"}).pacing,
            workload=WorkloadSpec(host_ms=host_ms, pacing_on=pacing_on),
        )
    )
    assert paced.delay_s[STEP, 0] == DELAY
    wait = plain.host_end_s()[STEP, 0] - plain.end_s[STEP - 1, 0]
    return float(paced.enter_s[STEP, 0, 0] - plain.enter_s[STEP, 0, 0]), float(wait)


def test_with_the_cpu_ahead_only_a_delay_on_the_device_moves_it(monkeypatch) -> None:
    on_device, wait = arrival_shift(monkeypatch, 10.0, "device")
    on_host, _ = arrival_shift(monkeypatch, 10.0, "host")
    assert wait < 0  # the host had issued the step long before the device got to it
    assert on_device == pytest.approx(DELAY, abs=1e-9)
    assert on_host == 0.0  # the sleep moved the enqueue, not the device


def test_with_the_host_the_bottleneck_both_move_it(monkeypatch) -> None:
    on_host, wait = arrival_shift(monkeypatch, 400.0, "host")
    on_device, _ = arrival_shift(monkeypatch, 400.0, "device")
    assert 0 < wait < DELAY  # the device waited for its host, less than the delay
    assert on_host == pytest.approx(DELAY, abs=1e-9)  # the whole sleep reaches the device
    assert on_device == pytest.approx(DELAY - wait, abs=1e-9)  # the wait absorbs the rest


def test_delay_shift_is_what_reaches_the_device() -> None:
    prev_end, delay = np.array([1.0, 1.0, 1.0]), np.array([0.3, 0.3, 0.3])
    issued = np.array([0.5, 1.1, 1.5])  # h_i without the delay: ahead, 0.1 and 0.5 behind
    on_device = delay_shift(prev_end, issued, delay, on_host=False)
    assert on_device == pytest.approx([0.3, 0.2, 0.0])  # the device's wait absorbs it
    on_host = delay_shift(prev_end, issued + delay, delay, on_host=True)
    assert on_host == pytest.approx([0.0, 0.3, 0.3])  # only a host that ends last passes it on


def test_the_pacer_sees_arrivals_without_the_part_of_its_delay_that_reached_the_device() -> None:
    # host far ahead, delay slept there: it never reaches the device, so the pacer is shown
    # the arrivals of the unpaced run and decides what a fresh pacer fed those decides
    cfg = config(
        noise={"rank_spread": 0.15},
        workload={"host_ms": 20.0, "pacing_on": "host"},
        pacing={"strategy": "early", "ab": False},
        run={"steps": 60},
    )
    paced = simulate(cfg)
    plain = simulate(cfg.replace(pacing=config().pacing))
    assert paced.delay_s.any() and np.array_equal(paced.end_s, plain.end_s)
    replay = Pacer(cfg.pacing, plain.world_size)
    bounds, prev = plain.end_s.max(axis=1), 0.0
    for i in range(cfg.run.steps):
        scheduled, _ = replay.delays_for(i)
        expected = np.zeros(plain.world_size) if scheduled is None else scheduled
        assert paced.delay_s[i] == pytest.approx(expected, abs=1e-12), i
        replay.observe(i, plain.enter_s[i, 0], bounds[i] - prev)
        prev = bounds[i]


def test_host_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="host_rank_ms needs one time per host rank"):
        WorkloadSpec(host_ranks=(1, 2), host_rank_ms=(5.0,))
    with pytest.raises(ConfigError, match="pacing_on: must be one of device, host"):
        WorkloadSpec(pacing_on="gpu")
    with pytest.raises(ConfigError, match="host rank outside the job"):
        simulate(config(workload={"host_ranks": [16], "host_rank_ms": [1.0]}))


def trace_of(tmp_path: Path, **workload: object):
    cfg = config(
        noise={"rank_spread": 0.15},
        pacing={"strategy": "early", "ab": False},
        workload=workload,
        run={"steps": 40},
    )
    result = simulate(cfg)
    trace = load_trace(write_trace(result, tmp_path))
    assert not trace.warnings
    return result, trace


def test_a_trace_without_a_host_is_the_device_times_as_before(tmp_path: Path) -> None:
    result, trace = trace_of(tmp_path)
    events = trace.events.filter(trace.events["rank"] == 3)
    expected = T0_NS + np.round(result.enter_s[:, :, 3].reshape(-1) * 1e9)
    assert np.array_equal(events["enter_ns"].to_numpy(), expected)
    assert (events["device_enter_ns"] == -1).all() and (events["device_exit_ns"] == -1).all()
    steps = trace.steps
    assert steps["pacing_delay_ns"].sum() > 0
    assert (steps["device_delay_ns"] == steps["pacing_delay_ns"]).all()  # on the device


@pytest.mark.parametrize("pacing_on", ["device", "host"])
def test_a_trace_with_a_host_has_both_clocks(tmp_path: Path, pacing_on: str) -> None:
    result, trace = trace_of(tmp_path, host_ms=50.0, host_jitter=0.2, pacing_on=pacing_on)
    events, steps = trace.events, trace.steps
    ahead = (events["device_enter_ns"] - events["enter_ns"]).to_numpy()
    assert ahead.min() > 0  # the host issues every call before the device reaches it
    assert (events["exit_ns"] >= events["enter_ns"]).all()
    rank = steps.filter(steps["rank"] == 2).sort("step")
    host_end = T0_NS + np.round(result.host_end_s()[:, 2] * 1e9)
    assert np.abs(rank["end_ns"].to_numpy() - host_end).max() <= 1  # the host's boundaries
    slept = (steps["pacing_delay_ns"] - steps["device_delay_ns"]).to_numpy()
    assert steps["pacing_delay_ns"].sum() > 0
    assert (slept == 0).all() if pacing_on == "device" else (steps["device_delay_ns"] == 0).all()
    assert (slept <= (steps["end_ns"] - steps["start_ns"]).to_numpy()).all()


def test_the_study_shows_a_delay_on_the_host_beside_one_on_the_device() -> None:
    # persistently early ranks whose waiting slows their neighbours: pacing on the device
    # helps; the host runs two steps ahead, so the same delays slept there do nothing
    cfg = config(
        topology={"nodes": 2, "gpus_per_node": 8, "nics_per_node": 8},
        noise={"rank_spread": 0.1, "jitter": 0.01},
        interference={"mode": "spin", "slowdown": 0.6},
        workload={"host_ms": 20.0},
        pacing={"strategy": "early", "ab": False},
        run={"steps": 120, "warmup": 30, "record_events": False},
    )
    study = run_study(cfg, [1, 2], placements=("device", "host"))
    assert [(r["nodes"], r["pacing_on"]) for r in study.rows] == [
        (1, "off"),
        (2, "off"),
        (1, "device"),
        (2, "device"),
        (1, "host"),
        (2, "host"),
    ]
    for off, device, host in zip(
        study.arm(False), study.arm(True, "device"), study.arm(True, "host"), strict=True
    ):
        assert device["pacing_gain"] > 0.01
        assert host["pacing_gain"] == 0.0 and host["iteration_ms"] == off["iteration_ms"]
        assert host["pacing_on_share"] > 0.5  # the pacer did delay the host, in vain
