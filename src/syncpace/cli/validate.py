"""``syncpace validate``: how far to trust the simulator.

Without ``--reference``: the validation grid (root): real traced runs on the emulated
fabric, the simulator calibrated from ``syncpace bench`` and each run's own compute
times, and the error table (mean iteration time, CV, p99, transfer time) with
``validation.json`` and ``validation.html`` in ``--out``. With ``--reference``: the
reference study (4–64 nodes) with and without pacing, next to the reference's figures.
See docs/validation.md. Parsing and printing only: :mod:`syncpace.validate`.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from syncpace.config import add_flags, from_flags
from syncpace.validate.grid import run_grid
from syncpace.validate.reference import run_reference
from syncpace.validate.settings import GridSettings, ReferenceSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="validate the simulator against real runs on the emulated fabric",
        description="Compare the calibrated simulator with real runs on the emulated "
        "fabric (root), or (--reference) rerun the reference study with and without pacing.",
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="run the reference study instead of the fabric grid",
    )
    add_flags(parser, GridSettings, title="the grid of fabric runs (root)")
    add_flags(parser, ReferenceSettings, title="the reference study (--reference)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console(width=max(Console().width, 150))
    if args.reference:
        return run_reference(from_flags(ReferenceSettings, args), console)
    return run_grid(from_flags(GridSettings, args), console)
