"""``syncpace demo``: a real traced DDP job with a planted straggler, explained.

Phases: run the job under ``syncpace run`` (4 gloo ranks on this machine, rank
``slow_rank`` sleeping longer every step), summarise the trace, diagnose it and
write the HTML report.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from syncpace.cli.run import prepare_run_dir, traced_env
from syncpace.config import setting
from syncpace.errors import SyncpaceError
from syncpace.trace.config import TraceConfig


@dataclass(kw_only=True, slots=True)
class DemoConfig:
    out: str = setting("syncpace-demo", "Directory for the demo's trace and report.")
    ranks: int = setting(4, "gloo ranks of the demo job (2..8).")
    steps: int = setting(40, "Training iterations.")
    compute_ms: float = setting(15.0, "Stand-in compute per step (sleep), every rank.")
    slow_rank: int = setting(2, "The planted straggler's rank.")
    slow_ms: float = setting(25.0, "Extra time the straggler spends every step.")
    timeout_s: float = setting(300.0, "Bound on the training job's run time.")

    def __post_init__(self) -> None:
        if not 2 <= self.ranks <= 8:
            raise SyncpaceError(f"ranks must be in 2..8, got {self.ranks}")
        if not 0 <= self.slow_rank < self.ranks:
            raise SyncpaceError(f"slow_rank must be in 0..{self.ranks - 1}, got {self.slow_rank}")
        if self.steps < 5:
            raise SyncpaceError(f"steps must be >= 5, got {self.steps}")


@dataclass(frozen=True)
class DemoResult:
    trace_dir: Path
    report: Path | None
    top_modes: tuple[str, ...]
    named_ranks: tuple[int, ...]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(config: DemoConfig, trace_dir: Path) -> None:
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc-per-node", str(config.ranks), "--master-port", str(_free_port()),
        "-m", "syncpace.demo.ddp_train",
        "--steps", str(config.steps), "--compute-ms", str(config.compute_ms),
        "--slow-rank", str(config.slow_rank), "--slow-ms", str(config.slow_ms),
    ]  # fmt: skip
    env = traced_env(trace_dir, TraceConfig(dir=str(trace_dir)))
    try:
        proc = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=config.timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        raise SyncpaceError(f"the demo job did not finish within {config.timeout_s:.0f}s") from exc
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise SyncpaceError(f"the demo job failed (exit {proc.returncode}): {tail[0]}")


def run_demo(config: DemoConfig, console: Console | None = None) -> DemoResult:
    from syncpace.analysis.api import analyze
    from syncpace.cli.trace_info import print_summary
    from syncpace.report.terminal import print_analysis
    from syncpace.trace.reader import load_trace
    from syncpace.trace.summary import summarize

    console = console or Console()
    out = Path(config.out).resolve()
    trace_dir = prepare_run_dir(str(out / "trace"), overwrite=True)
    with console.status(
        f"[1/3] training a DDP model on {config.ranks} gloo ranks, traced "
        f"(rank {config.slow_rank} is a planted straggler)…"
    ):
        run_job(config, trace_dir)
    trace = load_trace(trace_dir)
    print_summary(summarize(trace), console)
    with console.status("[2/3] diagnosing…"):
        analysis = analyze([trace])
    print_analysis(analysis, console)
    report = None
    with console.status("[3/3] writing the HTML report…"):
        try:
            from syncpace.report.html import write_html

            report = write_html(analysis, out / "report.html")
        except ImportError:
            console.print("report skipped: install the [report] extra for plotly")
    if report is not None:
        console.print(f"report: [bold]{report}[/]")
    top = analysis.findings[:3]
    return DemoResult(
        trace_dir=trace_dir,
        report=report,
        top_modes=tuple(f.mode for f in top),
        named_ranks=tuple(sorted({r for f in top for r in f.ranks})),
    )
