"""The A/B guard: is pacing measurably helping *this* job?

Steps are cut into windows of ``window`` steps; while probing, even windows let the
policy pace and odd windows force pacing off, and each paced window is paired with
the unpaced one after it (the first ``settle`` steps of each window are discarded:
the policy needs them to react). The confidence that pacing helps is a one-sided
sign test over the pairs: the probability of fewer paced-faster pairs than observed
if pacing made no difference. Step times within a window are correlated (a burst of
contention spans many steps), so pairs of window means, not steps, are the samples:
3 pairs can give at most 0.875. Pacing is kept only when paced windows are faster
overall with at least ``confidence``; otherwise it is turned off after ``max_pairs``.
Pure and deterministic: every rank feeds it the same gathered step times and reaches
the same verdict.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Verdict:
    state: str  # "probing", "helps", "no_help", "not_needed"
    on_steps: int
    off_steps: int
    on_mean_s: float | None
    off_mean_s: float | None
    on_cv: float | None
    off_cv: float | None
    throughput_gain: float | None  # off_mean / on_mean - 1
    confidence: float | None  # one-sided P(paced faster)

    def to_json(self) -> dict[str, object]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def sign_test_confidence(wins: int, pairs: int) -> float:
    """P(fewer than ``wins`` of ``pairs`` fair coin flips come up heads): the one-sided
    confidence that the paced arm is faster, from the pairs it won."""
    return sum(math.comb(pairs, i) for i in range(wins)) / 2**pairs


class ABGuard:
    def __init__(self, window: int, min_pairs: int, max_pairs: int, confidence: float, settle: int):
        self.window = window
        self.min_pairs = min_pairs
        self.max_pairs = max_pairs
        self.confidence = confidence
        self.settle = min(settle, window - 1)
        self.state = "probing"
        self._on: list[float] = []
        self._off: list[float] = []
        self._window_on: list[float] = []  # current pair's paced window
        self._window_off: list[float] = []
        self._wins = 0  # pairs whose paced window was faster
        self._pairs = 0
        self._paced_on = 0  # steps of "on" windows in which the policy was active

    def pacing_allowed(self, step: int) -> bool:
        """May the policy's delays be applied at ``step``?"""
        if self.state == "helps":
            return True
        if self.state in ("no_help", "not_needed"):
            return False
        return (step // self.window) % 2 == 0

    def observe(self, step: int, step_time_s: float, policy_active: bool) -> Verdict | None:
        """Feed the global time of ``step``; returns a verdict when the state changes."""
        if self.state != "probing" or step % self.window < self.settle:
            return None
        arm_on = (step // self.window) % 2 == 0
        (self._on if arm_on else self._off).append(step_time_s)
        (self._window_on if arm_on else self._window_off).append(step_time_s)
        self._paced_on += int(arm_on and policy_active)
        pairs = step // (2 * self.window)
        at_pair_end = step % (2 * self.window) == 2 * self.window - 1
        if not at_pair_end:
            return None
        if self._window_on and self._window_off:
            self._pairs += 1
            self._wins += int(np.mean(self._window_on) < np.mean(self._window_off))
        self._window_on, self._window_off = [], []
        if pairs + 1 < self.min_pairs:
            return None
        verdict = self.verdict()
        if self._paced_on == 0:
            self.state = "not_needed"
        elif (
            verdict.confidence is not None
            and verdict.confidence >= self.confidence
            and (verdict.throughput_gain or 0) > 0
        ):
            self.state = "helps"
        elif pairs + 1 >= self.max_pairs:
            self.state = "no_help"
        else:
            return None
        return self.verdict()

    def verdict(self) -> Verdict:
        on, off = np.asarray(self._on), np.asarray(self._off)
        if on.size < 2 or off.size < 2 or self._pairs == 0:
            return Verdict(self.state, on.size, off.size, None, None, None, None, None, None)
        on_mean, off_mean = float(on.mean()), float(off.mean())
        return Verdict(
            self.state,
            int(on.size),
            int(off.size),
            on_mean,
            off_mean,
            float(on.std() / on_mean),
            float(off.std() / off_mean),
            off_mean / on_mean - 1.0,
            sign_test_confidence(self._wins, self._pairs),
        )
