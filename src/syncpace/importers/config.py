"""Settings of a conversion (``syncpace import``'s flags only: a command, not the job)."""

from __future__ import annotations

from dataclasses import dataclass

from syncpace.config import check_choice, check_numbers, setting

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
        check_numbers(self, window_ms="(0, 3600000]", gloo_threads="[1, 256]")
        check_choice(self, "clocks", CLOCKS)
        check_choice(self, "timing", TIMINGS)
