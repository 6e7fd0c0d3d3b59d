"""``syncpace run [--out DIR] -- COMMAND …``: trace every rank of any command, unedited.

Parsing and printing only; the launch itself is :mod:`syncpace.capture.launch`.
"""

from __future__ import annotations

import argparse
import sys

from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import Tracing, armed_env, prepare_run_dir, run_command
from syncpace.cli.output import add_force_flag
from syncpace.cli.trace_info import print_trace_info
from syncpace.config import add_flags, from_flags
from syncpace.console import visible
from syncpace.control.config import ControllerConfig, PacingConfig
from syncpace.errors import ConfigError
from syncpace.monitor import MonitorConfig
from syncpace.telemetry import TelemetryConfig
from syncpace.trace import schema
from syncpace.trace.reader import load_trace


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a command (e.g. torchrun … train.py) with every rank traced",
        description="Run COMMAND with every torch.distributed rank traced, no code change. "
        "Example: syncpace run --out runs/a -- torchrun --nproc-per-node 4 train.py",
    )
    parser.add_argument(
        "--out", help="run directory for the trace (default: ./syncpace-run-YYYYmmdd-HHMMSS)"
    )
    add_force_flag(parser, "the trace files of an existing run directory")
    parser.add_argument(
        "--join",
        action="store_true",
        help="the directory is shared by the launches of one job's nodes: add this "
        "launch's ranks to it (see docs/multinode.md)",
    )
    parser.add_argument("--quiet", action="store_true", help="do not print the trace summary")
    add_tracing_flags(parser)
    parser.set_defaults(func=run)


def add_tracing_flags(parser: argparse.ArgumentParser) -> None:
    """The tracer, host sampler, pacer and controller flags, and the trailing ``-- COMMAND``."""
    add_flags(parser, TraceConfig, skip=("dir", "clock_skew_ns"), title="what is traced")
    add_flags(parser, TelemetryConfig, title="host counters sampled beside the job")
    add_flags(parser, PacingConfig, title="pacing: delays that even out arrivals")
    add_flags(parser, ControllerConfig, title="pacing: how ranks share their arrivals")
    add_flags(parser, MonitorConfig, title="live detection while the job runs")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS…]")


def command_of(args: argparse.Namespace, usage: str) -> list[str]:
    """The command after ``--``; ``usage`` names the verb's form in the error."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ConfigError(f"no command given: {usage}")
    return command


def tracing_from_flags(args: argparse.Namespace) -> Tracing:
    """Every tracing setting, validated: call before creating anything."""
    return (
        from_flags(TraceConfig, args),
        from_flags(ControllerConfig, args),
        from_flags(PacingConfig, args),
        from_flags(MonitorConfig, args),
        from_flags(TelemetryConfig, args),
    )


def run(args: argparse.Namespace) -> int:
    command = command_of(args, "syncpace run [--out DIR] -- COMMAND [ARGS…]")
    tracing = tracing_from_flags(args)  # bad values fail before anything is created
    run_dir = prepare_run_dir(args.out, args.force, args.join)
    code = run_command(command, armed_env(run_dir, tracing))
    print(f"syncpace run: trace in {visible(run_dir)}", file=sys.stderr)
    if not args.quiet and any(run_dir.glob(f"rank-*{schema.META_SUFFIX}")):
        print_trace_info(load_trace(run_dir))
    elif not any(run_dir.glob(f"rank-*{schema.META_SUFFIX}")):
        print(
            "syncpace run: no rank wrote a trace (did the command initialise torch.distributed?)",
            file=sys.stderr,
        )
    return code
