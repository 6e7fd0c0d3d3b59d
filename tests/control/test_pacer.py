"""The pacer (policy + lag + A/B guard), and that the simulator runs it unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from syncpace.control.ab import ABGuard
from syncpace.control.config import ControllerConfig, PacingConfig
from syncpace.control.controller import PacingController
from syncpace.control.pacer import Pacer
from syncpace.control.policy import PacingPolicy
from syncpace.sim.engine import simulate
from syncpace.sim.scenario import from_dict

EARLY = [0.0, 0.03, 0.03, 0.03]  # rank 0 arrives 30 ms before the others
STEP = 0.1


def feed(pacer: Pacer, steps: int) -> list:
    return [pacer.observe(s, np.array(EARLY), STEP) for s in range(steps)]


@pytest.mark.parametrize("lag", [1, 2, 5])
def test_a_decision_takes_effect_lag_steps_later(lag):
    cfg = PacingConfig(strategy="early", hold=2, ab=False, lag=lag)
    pacer, policy = Pacer(cfg, 4), PacingPolicy(cfg, 4)
    for step in range(12):
        expected = policy.observe(EARLY, STEP).delays_s
        observed = pacer.observe(step, np.array(EARLY), STEP)
        assert observed.apply_at == step + lag
        for sooner in range(step + 1, step + lag):
            assert pacer.delays_for(sooner)[0] is None  # no decision lands earlier
        delays, _ = pacer.delays_for(step + lag)
        if expected.any():
            assert delays == pytest.approx(expected)
        else:
            assert delays is None


def test_the_guard_holds_pacing_off_in_the_unpaced_windows():
    cfg = PacingConfig(strategy="early", hold=1, ab_window=4, ab_settle=0, lag=2)
    pacer = Pacer(cfg, 4)
    results = feed(pacer, 16)
    assert all(r.active for r in results[1:])  # the policy wants to pace throughout
    allowed = [r.allowed for r in results]
    guard = ABGuard(4, cfg.ab_min_pairs, cfg.ab_max_pairs, cfg.ab_confidence, 0)
    assert allowed == [guard.pacing_allowed(s + 2) for s in range(16)]
    assert True in allowed and False in allowed
    for r in results:
        assert r.delays_s.any() == (r.active and r.allowed)


def test_off_runs_no_guard_and_never_delays():
    pacer = Pacer(PacingConfig(hold=1), 4)
    assert pacer.guard is None and pacer.state == "no A/B"
    assert not any(r.delays_s.any() for r in feed(pacer, 10))


def test_a_rank_without_an_arrival_is_neither_paced_nor_judged():
    pacer = Pacer(PacingConfig(strategy="early", hold=1), 4)
    assert pacer.observe(0, np.array([0.0, np.nan, 0.1, 0.1]), STEP) is None
    assert pacer.guard._on == [] and pacer.guard._off == []


def test_the_simulator_applies_what_a_pacer_decides_from_its_own_arrivals():
    """Replay a paced simulation through a fresh Pacer: fed the arrivals and step times
    the engine produced, it gives exactly the delays the engine applied."""
    cfg = from_dict(
        {
            "topology": {"nodes": 4, "gpus_per_node": 4, "nics_per_node": 4},
            "noise": {"rank_spread": 0.15},
            "interference": {"mode": "spin"},
            "pacing": {"strategy": "early", "ab_window": 6, "ab_settle": 1},
            "run": {"steps": 80, "seed": 3},
        }
    ).config
    result = simulate(cfg)
    assert result.delay_s.any() and result.ab_state is not None
    replay = Pacer(cfg.pacing, result.world_size)
    bounds = result.end_s.max(axis=1)
    prev = 0.0
    for i in range(cfg.run.steps):
        scheduled, _ = replay.delays_for(i)
        expected = np.zeros(result.world_size) if scheduled is None else scheduled
        assert result.delay_s[i] == pytest.approx(expected, abs=1e-12), i
        arrivals = result.enter_s[i, 0] - result.delay_s[i]
        replay.observe(i, arrivals, bounds[i] - prev)
        prev = bounds[i]
    assert replay.state == result.ab_state


class _Channel:
    """The side channel for one rank: every rank's values of a step, ``lag`` later."""

    def __init__(self, rows: dict[int, np.ndarray]) -> None:
        self.rows, self.submitted, self.collected = rows, [], []

    def submit(self, step: int, values: list[float]) -> None:
        self.submitted.append(step)

    def collect(self, step: int) -> np.ndarray:
        self.collected.append(step)
        return self.rows[step]


def test_the_live_controller_applies_the_pacers_decisions_lag_steps_later():
    cfg = PacingConfig(strategy="early", hold=2, ab=False, lag=3)
    rows = {s: np.column_stack([EARLY, [STEP] * 4]) for s in range(20)}
    channel = _Channel(rows)
    controller = PacingController(ControllerConfig(), cfg, 0, 4, channel)
    reference = Pacer(cfg, 4)
    for step in range(20):
        decided, _ = reference.delays_for(step)
        assert controller.delay_for(step) == (0.0 if decided is None else decided[0])
        controller.on_step_end(step, EARLY[0], STEP)
        if step - cfg.lag + 1 >= 0:
            reference.observe(step - cfg.lag + 1, np.array(EARLY), STEP)
    assert channel.collected == list(range(20 - cfg.lag + 1))
    assert controller.paced_steps > 0
    assert controller.summary()["policy"] == "early"
