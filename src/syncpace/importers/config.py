"""Settings of a conversion (``syncpace import`` flags, ``SYNCPACE_*`` variables)."""

from __future__ import annotations

from dataclasses import dataclass

from syncpace.config import setting
from syncpace.errors import ConfigError

CLOCKS = ("auto", "trust", "estimate")
TIMINGS = ("auto", "host", "device")


@dataclass(kw_only=True, slots=True, frozen=True)
class ImportConfig:
    clocks: str = setting(
        "auto",
        "How ranks' clocks are put on rank 0's: trust (as recorded), estimate (offsets from "
        "the ends of collectives, which are nearly simultaneous on all members), auto "
        "(trust ranks on rank 0's host, estimate the others).",
    )
    timing: str = setting(
        "auto",
        "Which timestamps of a collective become enter/exit: host (the CPU side), device "
        "(the NCCL kernel on the GPU), auto (device where the trace has kernels).",
    )
    window_ms: float = setting(
        100.0,
        "NCCL Inspector logs record no iterations: the trace's steps are windows of this "
        "many milliseconds.",
    )
    gloo_threads: int = setting(
        2,
        "Worker threads of each gloo backend (torch's default 2): how a gloo job's "
        "profiler trace tells its process groups apart.",
    )
    overwrite: bool = setting(False, "Replace a trace already in the output directory.")

    def __post_init__(self) -> None:
        if self.clocks not in CLOCKS:
            raise ConfigError(f"clocks must be one of {', '.join(CLOCKS)}, got {self.clocks!r}")
        if self.timing not in TIMINGS:
            raise ConfigError(f"timing must be one of {', '.join(TIMINGS)}, got {self.timing!r}")
        if not 0 < self.window_ms <= 3_600_000:
            raise ConfigError(f"window_ms must be in (0, 3600000], got {self.window_ms}")
        if not 1 <= self.gloo_threads <= 256:
            raise ConfigError(f"gloo_threads must be in 1..256, got {self.gloo_threads}")
