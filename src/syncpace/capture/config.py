"""Settings of the tracer, read from ``SYNCPACE_*`` variables inside each rank."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from syncpace.config import check_numbers, setting


@dataclass(kw_only=True, slots=True)
class TraceConfig:
    ENV_PREFIX: ClassVar[str] = "SYNCPACE_"

    dir: str = setting("", "Run directory the per-rank trace files are written to.")
    flush_interval_s: float = setting(
        1.0, "Seconds between background flushes; a SIGKILL loses at most this much."
    )
    max_buffered_events: int = setting(
        1_000_000, "Events held in memory before new ones are dropped (and counted)."
    )
    clock_rounds: int = setting(
        64, "Round trips per clock-offset estimate; the one with the smallest RTT wins."
    )
    clock_interval_s: float = setting(
        30.0, "Seconds between clock-offset re-estimates during the run (0 disables)."
    )
    clock_timeout_s: float = setting(
        30.0, "Bound on any wait of the clock protocol; past it alignment fails open."
    )
    step_hook: bool = setting(
        True, "Mark iterations at every optimizer.step(); syncpace.step() overrides it."
    )
    clock_skew_ns: int = setting(
        0, "Artificial offset added to this rank's clock (tests and fabric emulation)."
    )
    clock_drift_ppm: float = setting(
        0.0, "Artificial rate error of this rank's clock, ppm (tests and fabric emulation)."
    )

    def __post_init__(self) -> None:
        check_numbers(
            self,
            flush_interval_s="[0.01, 3600]",
            max_buffered_events="[1, 1000000000]",
            clock_rounds="[1, 10000]",
            clock_interval_s="[0, 86400]",
            clock_timeout_s="(0, 3600]",
            clock_skew_ns="[-1e18, 1e18]",
            clock_drift_ppm="[-100000, 100000]",
        )
