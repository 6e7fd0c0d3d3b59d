from __future__ import annotations

import numpy as np
import pytest

from syncpace.control.ab import ABGuard, sign_test_confidence


def feed(
    guard: ABGuard,
    on_time: float,
    off_time: float,
    active: bool = True,
    steps: int = 200,
    seed: int = 0,
):
    rng = np.random.default_rng(seed)
    for step in range(steps):
        arm_on = (step // guard.window) % 2 == 0
        t = (on_time if arm_on else off_time) * (1 + 0.01 * rng.standard_normal())
        guard.observe(step, t, active)
    return guard


def test_faster_paced_windows_keep_pacing():
    guard = feed(ABGuard(10, 2, 5, 0.9, 2), on_time=0.095, off_time=0.100)
    assert guard.state == "helps"
    assert guard.pacing_allowed(10_000) is True
    v = guard.verdict()
    # every pair won: the sign test needs 4 pairs to pass 0.9 (1 - 1/16)
    assert v.throughput_gain > 0.03 and v.confidence == pytest.approx(1 - 1 / 16)


def test_no_difference_turns_pacing_off():
    guard = feed(ABGuard(10, 2, 4, 0.9, 2), on_time=0.1, off_time=0.1)
    assert guard.state == "no_help"
    assert guard.pacing_allowed(10_000) is False
    guard = feed(ABGuard(10, 2, 4, 0.9, 2), on_time=0.105, off_time=0.1)
    assert guard.state == "no_help"  # slower paced windows never keep pacing
    assert guard.pacing_allowed(10_000) is False


def test_no_difference_keeps_pacing_no_more_often_than_the_confidence_allows():
    """With nothing to find, a verdict of "helps" is a false positive of the sign test:
    all 4 pairs won by chance, 1/16 of the time, below the 1 - 0.9 the guard accepts."""
    states = [
        feed(ABGuard(10, 2, 4, 0.9, 2), on_time=0.1, off_time=0.1, seed=seed).state
        for seed in range(400)
    ]
    assert set(states) == {"no_help", "helps"}
    kept = states.count("helps") / len(states)
    assert 0.03 <= kept <= 0.1, kept


def test_policy_never_active_means_not_needed():
    guard = feed(ABGuard(10, 2, 4, 0.9, 2), 0.1, 0.1, active=False)
    assert guard.state == "not_needed"


def test_windows_alternate_while_probing():
    guard = ABGuard(4, 2, 4, 0.9, 1)
    assert [guard.pacing_allowed(s) for s in range(10)] == [True] * 4 + [False] * 4 + [True] * 2


def test_sign_test_confidence():
    assert sign_test_confidence(3, 3) == pytest.approx(0.875)
    assert sign_test_confidence(0, 3) == 0.0
    assert sign_test_confidence(4, 5) == pytest.approx(1 - 6 / 32)


def test_three_pairs_can_never_reach_0_9():
    guard = feed(ABGuard(10, 3, 3, 0.9, 2), on_time=0.05, off_time=0.1, steps=60)
    assert guard.state == "no_help"
    assert guard.verdict().confidence == pytest.approx(0.875)
