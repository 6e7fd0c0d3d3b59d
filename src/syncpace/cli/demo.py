"""``syncpace demo``: a real DDP job with planted problems, found, explained, paced, scaled."""

from __future__ import annotations

import argparse
from pathlib import Path

from syncpace.cli.output import add_force_flag, refuse_existing, refuse_existing_trace
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
    add_flags(parser, DemoConfig, title="the demo job")
    add_force_flag(parser, "an earlier demo's traces and reports in --out")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = from_flags(DemoConfig, args)
    out = Path(config.out)
    for page in ("report.html", "scaling.html"):
        refuse_existing(out / page, args.force, "--out")
    refuse_existing_trace(out, args.force)
    run_demo(config)
    return 0
