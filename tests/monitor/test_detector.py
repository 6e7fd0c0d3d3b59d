"""The live detector on gathered windows built from a known timeline."""

from __future__ import annotations

import math

import numpy as np
import pytest

from syncpace.monitor import OnlineDetector, Window

STEP_S = 0.1


def timeline(world: int, steps: int, late: dict[int, tuple[int, int, float]], seed: int = 0):
    """Arrivals with small jitter; ``late[rank] = (from_step, to_step, extra_s)``."""
    rng = np.random.default_rng(seed)
    arrivals = rng.normal(0.0, 0.001, size=(world, steps)) + np.arange(steps) * STEP_S
    for rank, (start, stop, extra) in late.items():
        arrivals[rank, start:stop] += extra
    step_s = np.full((world, steps), STEP_S) + arrivals.max(axis=0) - arrivals.min(axis=0)
    return arrivals, step_s


def feed(detector: OnlineDetector, arrivals, step_s, every: int):
    events = []
    for first in range(0, arrivals.shape[1], every):
        window = Window(first, arrivals[:, first : first + every], step_s[:, first : first + every])
        events.extend(detector.observe(window))
    return events


@pytest.mark.parametrize("world", [2, 4, 64])
def test_a_straggler_that_comes_and_goes_starts_and_stops_within_a_window(world):
    start, stop, every = 40, 90, 10
    arrivals, step_s = timeline(world, 150, {1: (start, stop, 0.012)})
    detector = OnlineDetector(world)
    delay = math.ceil(detector.h / (1 - detector.k))  # the documented change-point delay
    events = feed(detector, arrivals, step_s, every)
    starts = [e for e in events if e.kind == "straggler" and e.state == "start"]
    stops = [e for e in events if e.kind == "straggler" and e.state == "stop"]
    assert [e.rank for e in starts] == [1] and [e.rank for e in stops] == [1]
    assert start <= starts[0].step <= start + delay
    assert stop <= stops[0].step <= stop + delay
    assert starts[0].share == 1.0
    assert starts[0].detail["since_step"] == start  # the change point, not the alarm
    # What the others waited for it alone, per step, as a share of the step (~11 %).
    span = slice(start, starts[0].step + 1)
    ordered = np.sort(arrivals[:, span], axis=0)
    waited = (ordered[-1] - ordered[-2]) / step_s[:, span].max(axis=0)
    assert starts[0].cost == pytest.approx(waited.mean(), rel=1e-6)
    assert 0.08 < starts[0].cost < 0.11


def test_jitter_alone_and_a_one_off_slow_step_raise_nothing():
    arrivals, step_s = timeline(8, 400, {3: (100, 101, 0.5)}, seed=1)
    events = feed(OnlineDetector(8), arrivals, step_s, 10)
    assert [e for e in events if e.kind == "straggler"] == []


def test_a_rank_last_in_most_but_not_all_steps_is_found():
    world, steps = 8, 200
    arrivals, step_s = timeline(world, steps, {}, seed=2)
    rng = np.random.default_rng(3)
    slow_steps = np.flatnonzero(rng.random(steps) < 0.7)
    arrivals[5, slow_steps] += 0.01
    events = feed(OnlineDetector(world), arrivals, step_s, 10)
    assert {e.rank for e in events if e.state == "start"} == {5}


def test_equal_ranks_taking_turns_never_accumulate():
    world, steps = 2, 300
    arrivals = np.tile(np.arange(steps) * STEP_S, (world, 1))
    arrivals[np.arange(steps) % 2, np.arange(steps)] += 0.01  # rank 0, 1, 0, 1 … last
    step_s = np.full((world, steps), STEP_S)
    assert feed(OnlineDetector(world), arrivals, step_s, 10) == []


def test_step_time_jump_starts_and_stops():
    world, steps = 4, 120
    arrivals, step_s = timeline(world, steps, {})
    step_s[:, 50:80] *= 1.6
    events = [e for e in feed(OnlineDetector(world), arrivals, step_s, 10) if e.kind != "straggler"]
    assert [(e.kind, e.state) for e in events] == [
        ("step_time_jump", "start"),
        ("step_time_jump", "stop"),
    ]
    assert 50 <= events[0].step < 80 and events[0].cost == pytest.approx(0.6, abs=0.05)
    assert 80 <= events[1].step < 110


def test_scores_give_lateness_and_wait():
    arrivals, step_s = timeline(4, 30, {2: (0, 30, 0.02)})
    detector = OnlineDetector(4)
    feed(detector, arrivals, step_s, 10)
    slow, other = detector.score(2), detector.score(0)
    assert slow.last_share == 1.0 and other.last_share == 0.0
    assert slow.lateness_s == pytest.approx(0.02, abs=0.003)
    assert other.wait_fraction == pytest.approx(0.02 / 0.12, rel=0.2)
    assert slow.wait_fraction == pytest.approx(0.0, abs=1e-9)


def test_missing_arrivals_are_tolerated():
    arrivals, step_s = timeline(4, 20, {})
    arrivals[1, :] = np.nan
    assert feed(OnlineDetector(4), arrivals, step_s, 10) == []
