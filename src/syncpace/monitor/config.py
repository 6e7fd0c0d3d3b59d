"""Settings of the in-job monitor: the live detector, its telemetry and runtime control."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from syncpace.config import check_numbers, setting


@dataclass(kw_only=True, slots=True)
class MonitorConfig:
    ENV_PREFIX: ClassVar[str] = "SYNCPACE_"

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
        check_numbers(
            self,
            monitor_every="[0, 100000]",
            monitor_timeout_s="(0, 3600]",
            monitor_sensitivity="(0, 1000000)",
            monitor_min_gap="[0, 10]",
            monitor_jump="[0, 10]",
            metrics_port="[0, 65535]",
            control_poll_s="[0, 3600]",
        )
