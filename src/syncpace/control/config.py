"""Settings of the pacer (:class:`PacingConfig`, the same live and simulated) and of
the live controller's side channel (:class:`ControllerConfig`).

Both are read inside the job's ranks from ``SYNCPACE_*`` variables (``SYNCPACE_STRATEGY``,
``SYNCPACE_LAG``, ``SYNCPACE_CHANNEL_TIMEOUT_S``, …) and are flags of ``syncpace run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from syncpace.config import check_choice, check_numbers, setting
from syncpace.errors import ConfigError

STRATEGIES = ("off", "early", "target")


@dataclass(kw_only=True, slots=True)
class PacingConfig:
    """The pacer: which strategy, how the policy decides, how late its decision takes
    effect (``lag``) and how the A/B guard judges it. "off" is the one way to say no."""

    ENV_PREFIX: ClassVar[str] = "SYNCPACE_"

    strategy: str = setting("off", "Pacing strategy: off, early (the reference's) or target.")
    on_skew: float = setting(
        0.10, "Turn pacing on when arrival skew exceeds this fraction of the step time."
    )
    off_skew: float = setting(0.05, "Turn pacing off when skew falls below this fraction.")
    hold: int = setting(5, "Consecutive steps beyond a threshold before switching.")
    window: int = setting(20, "Steps of history behind the estimates.")
    gain: float = setting(0.5, "Fraction of a rank's typical earliness that is delayed.")
    target_quantile: float = setting(0.9, "target strategy: arrival quantile ranks pace to.")
    max_delay_s: float = setting(0.050, "Absolute bound on any delay, in seconds.")
    max_delay_fraction: float = setting(0.20, "Bound on any delay as a fraction of the step time.")
    lag: int = setting(
        2, "Steps between the step whose arrivals are seen and the step its delays apply to."
    )
    ab: bool = setting(True, "Alternate paced/unpaced windows and keep pacing only if it helps.")
    ab_window: int = setting(20, "Steps per A/B window.")
    ab_min_pairs: int = setting(3, "On/off window pairs before the first verdict.")
    ab_max_pairs: int = setting(10, "Pairs after which an unproven benefit turns pacing off.")
    ab_confidence: float = setting(0.9, "One-sided confidence needed to keep pacing on.")
    ab_settle: int = setting(3, "Steps at the start of each window left out of the comparison.")

    def __post_init__(self) -> None:
        check_numbers(
            self,
            on_skew="(0, 10]",
            off_skew="(0, 10]",
            hold="[1, 100000]",
            window="[1, 100000]",
            gain="(0, 1]",
            target_quantile="[0, 1]",
            max_delay_s="[0, 3600]",
            max_delay_fraction="[0, 1]",
            lag="[1, 1000]",
            ab_window="[2, 100000]",
            ab_min_pairs="[1, 100000]",
            ab_max_pairs="[1, 100000]",
            ab_confidence="[0.5, 1)",
            ab_settle="[0, 100000]",
        )
        check_choice(self, "strategy", STRATEGIES)
        if not self.off_skew < self.on_skew:
            raise ConfigError(
                f"need off_skew < on_skew for hysteresis, got {self.off_skew} and {self.on_skew}"
            )
        if self.ab_min_pairs > self.ab_max_pairs:
            raise ConfigError(
                f"need ab_min_pairs <= ab_max_pairs, got {self.ab_min_pairs} and "
                f"{self.ab_max_pairs}"
            )

    @property
    def paced(self) -> bool:
        return self.strategy != "off"


@dataclass(kw_only=True, slots=True)
class ControllerConfig:
    """What only the live controller has: its side channel and its log line."""

    ENV_PREFIX: ClassVar[str] = "SYNCPACE_"

    channel_timeout_s: float = setting(
        5.0, "Bound on waiting for a gathered step; past it pacing turns off for the run."
    )
    log_every: int = setting(0, "Rank 0 logs a one-line live view every N steps (0: never).")

    def __post_init__(self) -> None:
        check_numbers(self, channel_timeout_s="(0, 3600]", log_every="[0, 1000000000]")
