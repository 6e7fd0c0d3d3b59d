"""Starting commands with the tracer armed: the parent side of ``syncpace run``.

A traced command runs with ``capture/bootstrap`` first on ``PYTHONPATH``; its
``sitecustomize`` arms the tracer in every Python process that later initialises
``torch.distributed`` (torchrun's workers), and does nothing in the others. Every
launcher of the project (``syncpace run``, the fabric, the benchmark, the demo, the
validation grid) builds its environment here.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path

from syncpace.capture.config import TraceConfig
from syncpace.config import to_env
from syncpace.control.config import ControllerConfig
from syncpace.control.policy import PacingConfig
from syncpace.errors import ConfigError

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"

#: Everything a traced job is configured with: tracer, controller, pacing policy.
Tracing = tuple[TraceConfig, ControllerConfig, PacingConfig]


def prepare_run_dir(out: str | None, overwrite: bool, join: bool = False) -> Path:
    """The run directory, created; an existing trace in it is refused or, with
    ``overwrite``, its rank files are removed. With ``join`` (the launches of one job's
    nodes sharing a directory) other ranks' files are left alone: each rank writes
    its own."""
    run_dir = Path(out or time.strftime("syncpace-run-%Y%m%d-%H%M%S")).resolve()
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: exists and is not a directory")
    if join and overwrite:
        raise ConfigError("--join and --overwrite exclude each other")
    existing = sorted(run_dir.glob("rank-*")) if run_dir.exists() and not join else []
    if existing and not overwrite:
        raise ConfigError(
            f"{run_dir}: already holds a trace ({len(existing)} rank files); "
            "choose another --out, pass --overwrite, or --join when the nodes of one "
            "job share this directory"
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


def armed_env(
    run_dir: Path, tracing: Tracing, base: dict[str, str] | None = None
) -> dict[str, str]:
    """``traced_env`` for ``run_dir`` with all of ``tracing``."""
    trace, controller, pacing = tracing
    trace = dataclasses.replace(trace, dir=str(run_dir))
    return traced_env(run_dir, trace, base, controller, pacing)


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
