"""``syncpace validate``: how far to trust the simulator.

Without ``--reference``: the validation grid (root): real traced runs on the emulated
fabric, the simulator calibrated from ``syncpace bench`` and each run's own compute
times, and the error table (mean iteration time, CV, p99, transfer time) with
``validation.json`` and ``validation.html`` in ``--out``. With ``--reference``: the
reference study (4–64 nodes) with and without pacing, next to the reference's figures.
See docs/validation.md.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from syncpace.config import add_flags, from_flags, setting
from syncpace.errors import ConfigError
from syncpace.validate.grid import run_grid
from syncpace.validate.reference import run_reference


@dataclass(kw_only=True, slots=True)
class ValidateSettings:
    reference: bool = setting(False, "Run the reference study instead of the fabric grid.")
    out: str = setting("runs/validate", "Grid: directory for runs, JSON and the HTML plot.")
    points: str = setting("", "Grid: comma-separated point names (default: all).")
    rate: str = setting("50mbit", "Grid: host link rate of every fabric.")
    steps: int = setting(40, "Grid: steps of each real run (the first 5 are warm-up).")
    sim_steps: int = setting(400, "Grid: iterations of each simulation.")
    seed: int = setting(0, "Grid: seed of the simulations.")
    scenario: str | None = setting(None, "Reference: scenario file (default: the reference).")
    json: str | None = setting(None, "Reference: also write the rows to this JSON file.")

    def __post_init__(self) -> None:
        if self.steps < 10:
            raise ConfigError(f"--steps must be >= 10 (5 are warm-up), got {self.steps}")
        if self.sim_steps < 20:
            raise ConfigError(f"--sim-steps must be >= 20, got {self.sim_steps}")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="validate the simulator against real runs on the emulated fabric",
        description="Compare the calibrated simulator with real runs on the emulated "
        "fabric (root), or (--reference) rerun the reference study with and without pacing.",
    )
    add_flags(parser, ValidateSettings)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    settings = from_flags(ValidateSettings, args)
    console = Console(width=max(Console().width, 150))
    if settings.reference:
        return run_reference(settings.scenario, settings.json, console)

    return run_grid(settings, console)
