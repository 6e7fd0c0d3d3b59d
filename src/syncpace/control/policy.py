"""The pacing policy: pure and deterministic (no torch, no clocks, no I/O); the
:class:`~syncpace.control.pacer.Pacer` wraps it with the lag and the A/B guard.

Each step it is shown when every rank arrived at the synchronisation point and how
long the step took; it answers with a delay per rank for the next step.

* State: a window of recent normalised skews (``(max - min arrival) / step time``),
  an exponentially weighted estimate of how early each rank arrives, and an on/off
  switch with hysteresis: on after ``hold`` consecutive steps above ``on_skew``, off
  after ``hold`` consecutive steps below ``off_skew`` (``off_skew < on_skew``, so a
  stationary input between the two never flips it).
* Output: delays never above ``min(max_delay_s, max_delay_fraction × step time)``,
  never negative, all zero while off.

Strategies (``PacingConfig.strategy``):

* ``off`` — never delays.
* ``early`` — the reference's pacing: a rank that typically arrives much earlier
  than the last one (by more than ``on_skew`` of a step) is held back by ``gain`` times
  its typical earliness, shrinking the skew at the sync point.
* ``target`` — pace to a target: every rank is delayed towards the arrival of the
  ``target_quantile`` rank, trading a little mean step time for stability.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from syncpace.control.config import PacingConfig
from syncpace.errors import ConfigError


@dataclass(frozen=True)
class Decision:
    """What the policy decided after one step."""

    active: bool
    delays_s: np.ndarray = field(repr=False)  # one per rank, for the next step
    skew: float  # this step's arrival skew as a fraction of the step time
    bound_s: float  # the largest delay allowed for the next step

    @property
    def max_delay_s(self) -> float:
        return float(self.delays_s.max()) if self.delays_s.size else 0.0


class PacingPolicy:
    """Deterministic: the same sequence of observations gives the same decisions."""

    def __init__(self, config: PacingConfig, world_size: int) -> None:
        if world_size < 1:
            raise ConfigError(f"world_size must be >= 1, got {world_size}")
        self.config = config
        self.world_size = world_size
        self.active = False
        self._streak = 0  # consecutive steps on the other side of the threshold
        self._step_times: deque[float] = deque(maxlen=config.window)
        self._earliness = np.zeros(world_size)  # EWMA of (last arrival - own arrival), s
        self._alpha = 2.0 / (config.window + 1)
        self._seen = 0

    def observe(self, arrivals_s: np.ndarray | list[float], step_time_s: float) -> Decision:
        """Feed one step: arrival time of every rank (any common origin) and its duration."""
        arrivals = np.asarray(arrivals_s, dtype=float)
        if arrivals.shape != (self.world_size,):
            raise ValueError(f"expected {self.world_size} arrivals, got shape {arrivals.shape}")
        step_time = max(float(step_time_s), 1e-9)
        self._step_times.append(step_time)
        earliness = arrivals.max() - arrivals
        if self._seen == 0:
            self._earliness = earliness.copy()
        else:
            self._earliness += self._alpha * (earliness - self._earliness)
        self._seen += 1
        skew = float(earliness.max()) / step_time
        self._switch(skew)
        typical_step = float(np.median(self._step_times))
        bound = min(self.config.max_delay_s, self.config.max_delay_fraction * typical_step)
        delays = self._delays(typical_step) if self.active else np.zeros(self.world_size)
        return Decision(self.active, np.clip(delays, 0.0, bound), skew, bound)

    def _switch(self, skew: float) -> None:
        c = self.config
        beyond = skew < c.off_skew if self.active else skew > c.on_skew
        self._streak = self._streak + 1 if beyond else 0
        if self._streak >= c.hold:
            self.active = not self.active
            self._streak = 0

    def _delays(self, typical_step: float) -> np.ndarray:
        c = self.config
        if c.strategy == "off":
            return np.zeros(self.world_size)
        if c.strategy == "early":
            early = self._earliness > c.on_skew * typical_step
            return np.where(early, c.gain * self._earliness, 0.0)
        # target: bring everyone towards the target_quantile rank's typical arrival.
        target = np.quantile(self._earliness, 1.0 - c.target_quantile)
        return c.gain * np.maximum(self._earliness - target, 0.0)
