"""Settings of the tracer, read from ``SYNCPACE_*`` variables inside each rank.

The host sampler's (``host_sampler``, ``counters_*``) are its own:
:class:`syncpace.telemetry.config.TelemetryConfig`, read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from syncpace.config import check_numbers, setting
from syncpace.errors import ConfigError
from syncpace.trace.segments import RotationPolicy


@dataclass(kw_only=True, slots=True)
class TraceConfig:
    ENV_PREFIX: ClassVar[str] = "SYNCPACE_"

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
    device_time: bool = setting(
        True,
        "Time calls on CUDA tensors on the device too (two CUDA events per call, read "
        "off the training thread), and place the pacer's delay on the device's stream.",
    )
    journal_slots: int = setting(
        65536,
        "Records of the memory-mapped crash journal (112 bytes each; 0 disables it): a rank "
        "killed by a signal keeps every record made before it died.",
    )
    close_timeout_s: float = setting(
        2.0,
        "Bound on the wait at close for completions still being delivered (a backend "
        "thread's callback racing destroy_process_group).",
    )
    step_hook: bool = setting(
        True,
        "Mark iterations at every optimizer.step() (syncpace.step() overrides it), and "
        "each one's first backward pass.",
    )
    clock_skew_ns: int = setting(
        0, "Artificial offset added to this rank's clock (tests and fabric emulation)."
    )
    clock_drift_ppm: float = setting(
        0.0, "Artificial rate error of this rank's clock, ppm (tests and fabric emulation)."
    )
    # Stall watchdog (capture/watchdog.py) -------------------------------------------
    stall_after_s: float = setting(
        60.0,
        "A call in flight, or no progress at all, for this long is a stall: the rank "
        "writes rank-R.stall.json with its calls in flight and every thread's stack "
        "(0 disables the watchdog).",
    )
    stall_repeat_s: float = setting(
        30.0, "While a stall lasts, its record is rewritten this often with fresh stacks."
    )

    # Always-on mode (trace/segments.py) ----------------------------------------------
    continuous: bool = setting(
        False,
        "Always-on mode: rotate each rank's events through segments within a disk budget, "
        "keep per-step summaries of the whole run, and run the live monitor.",
    )
    segment_s: float = setting(60.0, "Always-on: seconds of events per segment file.")
    keep_s: float = setting(
        600.0,
        "Always-on: keep the events of the last this many seconds in full (and the pinned "
        "windows); 0 keeps whatever the budget allows.",
    )
    disk_budget_mb: float = setting(
        512.0, "Always-on: bound on one rank's event segments on disk, MiB."
    )
    anomaly_keep_s: float = setting(
        120.0,
        "Always-on: when the live monitor sees a straggler start or an iteration-time "
        "jump, keep full detail from this long before it to this long after.",
    )

    def rotation(self) -> RotationPolicy | None:
        """The writer's rotation in always-on mode, ``None`` otherwise."""
        if not self.continuous:
            return None
        return RotationPolicy(self.segment_s, self.keep_s, int(self.disk_budget_mb * 2**20))

    def __post_init__(self) -> None:
        check_numbers(
            self,
            segment_s="[0.01, 86400]",
            keep_s="[0, 31536000]",
            disk_budget_mb="[1, 16777216]",
            anomaly_keep_s="[0, 86400]",
            flush_interval_s="[0.01, 3600]",
            max_buffered_events="[1, 1000000000]",
            clock_rounds="[1, 10000]",
            clock_interval_s="[0, 86400]",
            clock_timeout_s="(0, 3600]",
            clock_skew_ns="[-1e18, 1e18]",
            clock_drift_ppm="[-100000, 100000]",
            stall_after_s="[0, 86400]",
            stall_repeat_s="(0, 86400]",
            close_timeout_s="[0, 600]",
            journal_slots="[0, 16777216]",
        )
        if 0 < self.journal_slots < 256:  # 0 is off; a ring smaller than this is no use
            raise ConfigError(
                f"journal_slots must be 0 (off) or in 256..{1 << 24}, got {self.journal_slots}"
            )
