"""Settings of the tracer, read from ``SYNCPACE_*`` variables inside each rank."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from syncpace.config import check_choice, check_numbers, setting
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
        True, "Mark iterations at every optimizer.step(); syncpace.step() overrides it."
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
    host_sampler: str = setting(
        "thread",
        "Host counters and topology, one sampler per host: 'thread' (a thread of the "
        "host's first rank), 'process' (a child process of it: no GIL, a start-up cost) "
        "or 'off'.",
    )
    counters_interval_s: float = setting(
        0.01, "Seconds between samples of NIC and qdisc counters (0.001 sees shorter bursts)."
    )
    counters_slow_interval_s: float = setting(
        0.1, "Seconds between samples of TCP/UDP, InfiniBand and NVML counters."
    )
    counters_nics: str = setting(
        "",
        "Interfaces to sample, comma-separated names or globs; empty: the PCI network "
        "devices, or every interface that is up when the host has none.",
    )
    counters_link_rate: str = setting(
        "",
        "Link rate utilisation is measured against, '25gbit' or 'eth0=25gbit,eth1=10gbit'; "
        "empty: a root tbf shaper's rate, else the interface's speed.",
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
            counters_interval_s="[0.0005, 3600]",
            counters_slow_interval_s="[0.0005, 3600]",
            stall_after_s="[0, 86400]",
            stall_repeat_s="(0, 86400]",
            close_timeout_s="[0, 600]",
            journal_slots="[0, 16777216]",
        )
        if 0 < self.journal_slots < 256:  # 0 is off; a ring smaller than this is no use
            raise ConfigError(
                f"journal_slots must be 0 (off) or in 256..{1 << 24}, got {self.journal_slots}"
            )
        check_choice(self, "host_sampler", SAMPLER_MODES)
        parse_link_rates(self.counters_link_rate)  # raises ConfigError when malformed


#: How the host sampler runs (``host_sampler``).
SAMPLER_MODES = ("process", "thread", "off")

_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}


def parse_rate(text: str, source: str = "counters_link_rate") -> int:
    """``'25gbit'`` -> 25_000_000_000 (decimal bits per second, as tc writes them)."""
    raw = text.strip().lower()
    for unit in sorted(_RATE_UNITS, key=len, reverse=True):
        if raw.endswith(unit):
            number = raw[: -len(unit)].strip()
            try:
                value = float(number)
            except ValueError:
                break
            if value > 0 and value == value and value != float("inf"):
                return int(value * _RATE_UNITS[unit])
            break
    raise ConfigError(f"{source}: expected a rate such as 25gbit or 100mbit, got {text!r}")


def parse_link_rates(text: str) -> dict[str, int]:
    """``'25gbit'`` -> ``{'*': …}``; ``'eth0=25gbit,eth1=10gbit'`` -> per interface."""
    rates: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, rate = part.rpartition("=")
        rates[name.strip() if sep else "*"] = parse_rate(rate)
    return rates
