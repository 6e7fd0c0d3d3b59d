"""Settings of the host sampler, read from ``SYNCPACE_*`` variables inside each rank.

They are the tracer's variables and ``syncpace run``'s flags as before (the names did
not change): the tracer reads them beside its own and hands them to the sampler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from syncpace.config import check_choice, check_numbers, setting
from syncpace.errors import ConfigError

#: How the host sampler runs (``host_sampler``).
SAMPLER_MODES = ("process", "thread", "off")


@dataclass(kw_only=True, slots=True)
class TelemetryConfig:
    ENV_PREFIX: ClassVar[str] = "SYNCPACE_"

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

    def __post_init__(self) -> None:
        check_numbers(
            self,
            counters_interval_s="[0.0005, 3600]",
            counters_slow_interval_s="[0.0005, 3600]",
        )
        check_choice(self, "host_sampler", SAMPLER_MODES)
        parse_link_rates(self.counters_link_rate)  # raises ConfigError when malformed


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
