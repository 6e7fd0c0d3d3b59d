"""The A/B guard: is pacing measurably helping *this* job?

Steps are cut into windows of ``window`` steps; while probing, even windows let the
policy pace and odd windows force pacing off. After ``min_pairs`` on/off pairs the
step times of the two arms are compared (the first ``settle`` steps of each window
are discarded: the policy needs them to react). Pacing is kept only when paced steps
are faster with a one-sided confidence of at least ``confidence``; otherwise it is
turned off for the rest of the run. Pure and deterministic: every rank feeds it the
same gathered step times and reaches the same verdict.
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


def _one_sided_confidence(on: np.ndarray, off: np.ndarray) -> float:
    """Welch's t statistic for mean(off) > mean(on), turned into a confidence with the
    normal approximation (the arms hold tens of steps or more)."""
    var = on.var(ddof=1) / on.size + off.var(ddof=1) / off.size
    if var <= 0:
        return 1.0 if off.mean() > on.mean() else 0.0
    t = (off.mean() - on.mean()) / math.sqrt(var)
    return 0.5 * (1.0 + math.erf(t / math.sqrt(2.0)))


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
        self._paced_on += int(arm_on and policy_active)
        pairs = step // (2 * self.window)
        at_pair_end = step % (2 * self.window) == 2 * self.window - 1
        if not at_pair_end or pairs + 1 < self.min_pairs:
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
        if on.size < 2 or off.size < 2:
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
            _one_sided_confidence(on, off),
        )
