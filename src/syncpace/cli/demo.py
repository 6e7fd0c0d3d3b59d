"""``syncpace demo``: a real DDP job with planted problems, found, explained, paced, scaled."""

from __future__ import annotations

import argparse

from syncpace.config import add_flags, from_flags
from syncpace.demo.pipeline import DemoConfig, run_demo


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="train a small real DDP job with planted problems; diagnose, pace, simulate, report",
        description="Train an MLP on scikit-learn's digits with DDP on 4 gloo ranks (across an "
        "emulated leaf-spine fabric as root, on localhost otherwise) with a planted straggler "
        "and a contended uplink; trace it with no code change, diagnose it, run the pacing A/B, "
        "simulate the same job at 8-256 nodes and write report.html.",
    )
    add_flags(parser, DemoConfig)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_demo(from_flags(DemoConfig, args))
    return 0
