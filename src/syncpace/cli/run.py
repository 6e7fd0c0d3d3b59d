"""``syncpace run [--out DIR] -- COMMAND …``: trace every rank of any command, unedited.

The command runs with ``trace/bootstrap`` first on ``PYTHONPATH``; its
``sitecustomize`` arms the tracer in every Python process that later initialises
``torch.distributed`` (torchrun's workers), and does nothing in the others.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from syncpace.config import add_flags, from_flags, to_env
from syncpace.control.config import ControllerConfig
from syncpace.control.policy import PacingConfig
from syncpace.errors import ConfigError
from syncpace.trace import schema
from syncpace.trace.config import TraceConfig

BOOTSTRAP_DIR = Path(__file__).resolve().parent.parent / "trace" / "bootstrap"


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
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the trace files of an existing run directory instead of refusing",
    )
    parser.add_argument("--quiet", action="store_true", help="do not print the trace summary")
    add_tracing_flags(parser)
    parser.set_defaults(func=run)


def add_tracing_flags(parser: argparse.ArgumentParser) -> None:
    """The tracer, controller and policy flags, and the trailing ``-- COMMAND``."""
    add_flags(parser, TraceConfig, skip=("dir", "clock_skew_ns"))
    add_flags(parser, ControllerConfig)
    add_flags(parser, PacingConfig, skip=("strategy",))
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS…]")


def command_of(args: argparse.Namespace, usage: str) -> list[str]:
    """The command after ``--``; ``usage`` names the verb's form in the error."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ConfigError(f"no command given: {usage}")
    return command


Tracing = tuple[TraceConfig, ControllerConfig, PacingConfig]


def tracing_from_flags(args: argparse.Namespace) -> Tracing:
    """Every tracing setting, validated: call before creating anything."""
    return (
        from_flags(TraceConfig, args),
        from_flags(ControllerConfig, args),
        from_flags(PacingConfig, args),
    )


def armed_env(
    run_dir: Path, tracing: Tracing, base: dict[str, str] | None = None
) -> dict[str, str]:
    """``traced_env`` for ``run_dir`` with all of ``tracing``."""
    trace, controller, pacing = tracing
    trace = dataclasses.replace(trace, dir=str(run_dir))
    return traced_env(run_dir, trace, base, controller, pacing)


def prepare_run_dir(out: str | None, overwrite: bool) -> Path:
    run_dir = Path(out or time.strftime("syncpace-run-%Y%m%d-%H%M%S")).resolve()
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: exists and is not a directory")
    existing = sorted(run_dir.glob("rank-*")) if run_dir.exists() else []
    if existing and not overwrite:
        raise ConfigError(
            f"{run_dir}: already holds a trace ({len(existing)} rank files); "
            "choose another --out or pass --overwrite"
        )
    for path in existing:
        if path.name.startswith("rank-") and path.suffix in (".json", ".arrow", ".tmp"):
            path.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def traced_env(
    run_dir: Path, config: TraceConfig, base: dict[str, str] | None = None, *extra: object
) -> dict[str, str]:
    """The environment that arms the tracer (and, with ``extra`` configs such as a
    ControllerConfig, the pacer) in every rank the command starts."""
    env = dict(os.environ if base is None else base)
    env.update(to_env(config))
    for settings in extra:
        env.update(to_env(settings))
    env["SYNCPACE_DIR"] = str(run_dir)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(BOOTSTRAP_DIR) + (os.pathsep + path if path else "")
    return env


def run(args: argparse.Namespace) -> int:
    command = command_of(args, "syncpace run [--out DIR] -- COMMAND [ARGS…]")
    tracing = tracing_from_flags(args)  # bad values fail before anything is created
    run_dir = prepare_run_dir(args.out, args.overwrite)
    code = run_command(command, armed_env(run_dir, tracing))
    print(f"syncpace run: trace in {run_dir}", file=sys.stderr)
    if not args.quiet and any(run_dir.glob(f"rank-*{schema.META_SUFFIX}")):
        from syncpace.cli.trace_info import print_summary
        from syncpace.trace.reader import load_trace
        from syncpace.trace.summary import summarize

        print_summary(summarize(load_trace(run_dir)))
    elif not any(run_dir.glob(f"rank-*{schema.META_SUFFIX}")):
        print(
            "syncpace run: no rank wrote a trace (did the command initialise torch.distributed?)",
            file=sys.stderr,
        )
    return code


def run_command(command: list[str], env: dict[str, str]) -> int:
    """Run ``command``, forwarding SIGINT/SIGTERM to it, and return its exit code."""
    try:
        proc = subprocess.Popen(command, env=env)
    except FileNotFoundError as exc:
        raise ConfigError(f"{command[0]}: command not found") from exc
    forwarded = {}

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        forwarded[sig] = signal.signal(sig, forward)
    try:
        return proc.wait()
    finally:
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
