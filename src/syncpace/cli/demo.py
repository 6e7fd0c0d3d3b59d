"""``syncpace demo``: see syncpace find a planted straggler in a real traced job."""

from __future__ import annotations

import argparse

from syncpace.config import add_flags, from_flags
from syncpace.demo.pipeline import DemoConfig, run_demo


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run a small traced DDP job with a planted straggler, diagnose it, write a report",
        description="Train a small DDP model on local gloo ranks with one planted straggler, "
        "trace it with no code change, diagnose it and write report.html.",
    )
    add_flags(parser, DemoConfig)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = run_demo(from_flags(DemoConfig, args))
    print(f"demo: top findings {', '.join(result.top_modes)}; trace in {result.trace_dir}")
    return 0
