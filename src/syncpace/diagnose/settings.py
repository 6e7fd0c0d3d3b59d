"""What a diagnosis takes besides the runs: every flag ``diagnose`` and ``report`` share."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from syncpace.analysis.thresholds import Thresholds
from syncpace.config import check_numbers, setting
from syncpace.control.config import PacingConfig

#: The fields that are settings objects of their own: not flags of this class (the
#: thresholds have a flag each, from their own class).
NESTED = ("thresholds", "pacing")


@dataclass(kw_only=True, slots=True)
class DiagnoseSettings:
    """The settings of :func:`syncpace.diagnose.diagnose_runs`; ``DiagnoseSettings()`` is
    what ``syncpace diagnose`` runs with no flag given. Read from flags only, never from
    the environment (a command's own settings)."""

    warmup_steps: int = setting(1, "Iterations left out at the start (setup, first-call costs).")
    bench: str | os.PathLike[str] | None = setting(
        None,
        "A syncpace bench result (bench.json or its run directory) from the same fabric: "
        "its all-reduce bus bandwidth becomes the link rate (--link-gbps) and its latency "
        "the link latency (--link-alpha-us) where those are not given, so contention that "
        "lasts the whole run is measured against the link, not the run.",
    )
    thresholds: Thresholds = setting(
        Thresholds(), "Every judgement of the detectors (each a flag of its own)."
    )
    # PacingConfig is mutable, so unhashable: a dataclass default must come from a factory.
    pacing: PacingConfig = dataclasses.field(
        default_factory=PacingConfig,
        metadata={
            "help": "The pacer replayed for the what-if table's pacing row (policy, lag, "
            "A/B guard); the live controller's defaults."
        },
    )

    def __post_init__(self) -> None:
        check_numbers(self, warmup_steps="[0, 10000000]")
