"""The pacer: the policy, its lag and its A/B guard, as one object.

The live controller (inside every rank) and the simulator both run this object
unchanged, so a simulated "pacing" is the pacer a user would run. Each step it is
shown every rank's arrival at the synchronisation point and the step's time; the
policy's answer takes effect ``lag`` steps later (live: the side channel's gather of
step ``s`` is collected at the end of step ``s + lag - 1``), and only while the A/B
guard lets it: while probing, alternate windows run unpaced; after the verdict,
pacing stays on only where it measurably helped.

Pure and deterministic (no torch, no clocks, no I/O): the same observations give the
same delays, which is how every rank reaches the same decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from syncpace.control.ab import ABGuard, Verdict
from syncpace.control.config import PacingConfig
from syncpace.control.policy import PacingPolicy


@dataclass(frozen=True)
class PacerStep:
    """What the pacer made of one observed step."""

    apply_at: int  # the step its delays are for
    delays_s: np.ndarray = field(repr=False)  # per rank; zero while the guard holds off
    bound_s: float  # the largest delay the policy allowed
    active: bool  # the policy wants to pace
    allowed: bool  # the A/B guard lets it at ``apply_at``
    skew: float  # the observed step's arrival skew, fraction of the step time
    verdict: Verdict | None  # an A/B verdict reached at this step

    @property
    def pacing(self) -> bool:
        return self.active and self.allowed


class Pacer:
    def __init__(self, config: PacingConfig, world_size: int) -> None:
        self.config = config
        self.world_size = world_size
        self.policy = PacingPolicy(config, world_size)
        self.guard = (
            ABGuard(
                config.ab_window,
                config.ab_min_pairs,
                config.ab_max_pairs,
                config.ab_confidence,
                config.ab_settle,
            )
            if config.ab and config.paced
            else None
        )
        self.verdict: Verdict | None = None
        self._scheduled: dict[int, tuple[np.ndarray, float]] = {}

    @property
    def state(self) -> str:
        """The guard's state (probing, helps, no_help, not_needed), or "no A/B"."""
        return self.guard.state if self.guard is not None else "no A/B"

    def observe(self, step: int, arrivals_s: np.ndarray, step_time_s: float) -> PacerStep | None:
        """Feed ``step``: every rank's arrival (any common origin) and the step time.

        Returns ``None`` when a rank has no arrival (NaN: it issued no collective in
        that step), which is neither paced on nor shown to the guard."""
        arrivals = np.asarray(arrivals_s, dtype=float)
        if np.isnan(arrivals).any():
            return None
        decision = self.policy.observe(arrivals - arrivals.min(), step_time_s)
        apply_at = step + self.config.lag
        allowed, verdict = True, None
        if self.guard is not None:
            verdict = self.guard.observe(step, step_time_s, decision.active)
            if verdict is not None:
                self.verdict = verdict
            allowed = self.guard.pacing_allowed(apply_at)
        delays = decision.delays_s if allowed else np.zeros(self.world_size)
        if delays.any():
            self._scheduled[apply_at] = (delays, decision.bound_s)
        return PacerStep(
            apply_at, delays, decision.bound_s, decision.active, allowed, decision.skew, verdict
        )

    def delays_for(self, step: int) -> tuple[np.ndarray | None, float]:
        """The delays decided for ``step`` (``None``: none) and the bound they had."""
        delays, bound = self._scheduled.pop(step, (None, 0.0))
        return delays, bound

    def clear(self) -> None:
        self._scheduled.clear()

    def summary_verdict(self) -> Verdict | None:
        """The verdict reached, or the guard's current evidence while probing."""
        if self.verdict is not None:
            return self.verdict
        return self.guard.verdict() if self.guard is not None else None
