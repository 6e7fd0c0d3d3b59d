"""Settings of the live pacing controller (the policy's own are in policy.py)."""

from __future__ import annotations

from dataclasses import dataclass

from syncpace.config import setting
from syncpace.errors import ConfigError


@dataclass(kw_only=True, slots=True)
class ControllerConfig:
    pace: str = setting("off", "Pacing strategy to run live: off, early or target.")
    lag: int = setting(
        2, "Steps between gathering arrivals and applying the decision made from them."
    )
    channel_timeout_s: float = setting(
        5.0, "Bound on waiting for a gathered step; past it pacing turns off for the run."
    )
    ab: bool = setting(True, "Alternate paced/unpaced windows and keep pacing only if it helps.")
    ab_window: int = setting(20, "Steps per A/B window.")
    ab_min_pairs: int = setting(3, "On/off window pairs before the first verdict.")
    ab_max_pairs: int = setting(10, "Pairs after which an unproven benefit turns pacing off.")
    ab_confidence: float = setting(0.9, "One-sided confidence needed to keep pacing on.")
    ab_settle: int = setting(3, "Steps at the start of each window left out of the comparison.")
    log_every: int = setting(0, "Rank 0 logs a one-line live view every N steps (0: never).")

    def __post_init__(self) -> None:
        if self.pace not in ("off", "early", "target"):
            raise ConfigError(f"pace must be off, early or target, got {self.pace!r}")
        if self.lag < 1:
            raise ConfigError(f"lag must be >= 1, got {self.lag}")
        if self.channel_timeout_s <= 0:
            raise ConfigError(f"channel_timeout_s must be > 0, got {self.channel_timeout_s}")
        if self.ab_window < 2 or not 1 <= self.ab_min_pairs <= self.ab_max_pairs:
            raise ConfigError("need ab_window >= 2 and 1 <= ab_min_pairs <= ab_max_pairs")
        if not 0.5 <= self.ab_confidence < 1:
            raise ConfigError(f"ab_confidence must be in [0.5, 1), got {self.ab_confidence}")
