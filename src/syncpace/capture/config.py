"""Settings of the tracer, read from ``SYNCPACE_*`` variables inside each rank."""

from __future__ import annotations

from dataclasses import dataclass

from syncpace.config import setting
from syncpace.errors import ConfigError


@dataclass(kw_only=True, slots=True)
class TraceConfig:
    dir: str = setting("", "Run directory the per-rank trace files are written to.")
    flush_interval_s: float = setting(
        1.0,
        "Seconds between background flushes into the Arrow streams (what a killed rank "
        "has not flushed is recovered from its journal).",
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
    journal_slots: int = setting(
        65536,
        "Records of the memory-mapped crash journal (96 bytes each; 0 disables it): a rank "
        "killed by a signal keeps every record made before it died.",
    )
    close_timeout_s: float = setting(
        2.0,
        "Bound on the wait at close for completions still being delivered (a backend "
        "thread's callback racing destroy_process_group).",
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
        if self.flush_interval_s <= 0:
            raise ConfigError(f"flush_interval_s must be > 0, got {self.flush_interval_s}")
        if self.max_buffered_events < 1:
            raise ConfigError(f"max_buffered_events must be >= 1, got {self.max_buffered_events}")
        if not 1 <= self.clock_rounds <= 10_000:
            raise ConfigError(f"clock_rounds must be in 1..10000, got {self.clock_rounds}")
        if abs(self.clock_drift_ppm) > 100_000:
            raise ConfigError(f"clock_drift_ppm must be within ±100000, got {self.clock_drift_ppm}")
        if self.clock_interval_s < 0:
            raise ConfigError(f"clock_interval_s must be >= 0, got {self.clock_interval_s}")
        if self.journal_slots != 0 and not 256 <= self.journal_slots <= 1 << 24:
            raise ConfigError(
                f"journal_slots must be 0 (off) or in 256..{1 << 24}, got {self.journal_slots}"
            )
        if not 0 <= self.close_timeout_s <= 600:
            raise ConfigError(f"close_timeout_s must be in 0..600, got {self.close_timeout_s}")
        if self.clock_timeout_s <= 0:
            raise ConfigError(f"clock_timeout_s must be > 0, got {self.clock_timeout_s}")
