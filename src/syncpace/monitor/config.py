"""Settings of the in-job monitor: the live detector, its telemetry and runtime control."""

from __future__ import annotations

from dataclasses import dataclass

from syncpace.config import setting
from syncpace.errors import ConfigError


@dataclass(kw_only=True, slots=True)
class MonitorConfig:
    monitor_every: int = setting(
        0,
        "Combine every rank's per-step summaries every N steps and run the live detector "
        "(0: off; --continuous turns it on at 10).",
    )
    monitor_timeout_s: float = setting(
        10.0, "Bound on waiting for a gathered window; past it the monitor turns off."
    )
    monitor_sensitivity: float = setting(
        4.0,
        "Change-point threshold (CUSUM, in steps of evidence): higher waits longer and "
        "raises fewer alarms.",
    )
    monitor_min_gap: float = setting(
        0.02,
        "A step counts against the last rank only when the others waited for it alone at "
        "least this fraction of the step.",
    )
    monitor_jump: float = setting(
        0.25, "Report an iteration-time jump when a window's median exceeds the baseline by this."
    )
    metrics_port: int = setting(
        0,
        "Serve Prometheus metrics on this port plus the local rank (0: off; needs the "
        "prometheus-client package, the [monitor] extra).",
    )
    metrics_addr: str = setting("0.0.0.0", "Address the Prometheus endpoint listens on.")
    control_poll_s: float = setting(
        2.0, "Seconds between checks of the run directory's control.json (0: never)."
    )

    def __post_init__(self) -> None:
        if self.monitor_every < 0 or self.monitor_every > 100_000:
            raise ConfigError(f"monitor_every must be in 0..100000, got {self.monitor_every}")
        for name in ("monitor_timeout_s", "monitor_sensitivity"):
            value = getattr(self, name)
            if not 0 < value < 1e6:  # also refuses NaN
                raise ConfigError(f"{name} must be a positive number, got {value}")
        for name in ("monitor_min_gap", "monitor_jump"):
            value = getattr(self, name)
            if not 0 <= value <= 10:
                raise ConfigError(f"{name} must be in 0..10, got {value}")
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be in 0..65535, got {self.metrics_port}")
        if not 0 <= self.control_poll_s <= 3600:
            raise ConfigError(f"control_poll_s must be in 0..3600, got {self.control_poll_s}")
