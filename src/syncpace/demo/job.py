"""Running the demo's training job: 4 gloo ranks on this machine or across the fabric.

``JobSpec`` says what to train and what to plant; :func:`run_local` starts it with
torchrun on localhost, :func:`run_on_fabric` starts one rank per host of an emulated
leaf-spine (root) and, from a given step on, greedy TCP flows across the spine.
Both report progress from rank 0's output lines, bound the job's run time and leave
nothing running behind them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from syncpace.errors import SyncpaceError
from syncpace.fabric import build_spec, bulk
from syncpace.fabric.backend import SystemBackend
from syncpace.fabric.lifecycle import down, up
from syncpace.fabric.runner import RunOptions, run_job
from syncpace.ports import free_port
from syncpace.trace.schema import LINKS_FILE

RANKS = 4
# Host h3 sends to both hosts of the other leaf: leaf1's uplink carries two greedy
# flows besides the ring's own traffic (the host links carry one each).
CROSS_SPINE = [("h3", "h0"), ("h3", "h1")]
FLOW_PORT = 5301

_TOTAL = re.compile(r"digits_ddp: .* (\d+) steps$")
_STEP = re.compile(r"^step (\d+)/(\d+) loss ([0-9.]+)")
_ACCURACY = re.compile(r"held-out accuracy ([0-9.]+)%")


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    epochs: int
    max_steps: int
    slow_rank: int
    slow_ms: float
    timeout_s: float

    def args(self) -> list[str]:
        return [
            "--epochs",
            str(self.epochs),
            "--max-steps",
            str(self.max_steps),
            "--slow-rank",
            str(self.slow_rank),
            "--slow-ms",
            f"{self.slow_ms:g}",
            "--log-every",
            "1",
            "--timeout-s",
            "60",
        ]


@dataclass
class JobOutcome:
    steps: int = 0
    total: int = 0
    accuracy: float | None = None
    contention_from_step: int | None = None
    contention_error: str | None = None
    contention_since_ns: int | None = None
    tail: list[str] | None = None


class Monitor:
    """Reads rank 0's lines: steps for the progress bar, the held-out accuracy, and the
    moment to start background traffic (``at_step``, once, off the reading thread)."""

    def __init__(
        self,
        progress: Callable[[int, int], None],
        at_step: int | None = None,
        on_step: Callable[[], None] | None = None,
    ) -> None:
        self.outcome = JobOutcome(tail=[])
        self._progress = progress
        self._at_step = at_step
        self._on_step = on_step
        self._buffer = ""
        self.thread: threading.Thread | None = None

    # a file-like sink for the fabric's launcher output ("[h0] line\n")
    def write(self, text: str) -> int:
        self._buffer += text
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            self.feed(line.split("] ", 1)[1] if line.startswith("[h") else line)
        return len(text)

    def flush(self) -> None:
        pass

    def feed(self, line: str) -> None:
        out = self.outcome
        assert out.tail is not None
        out.tail = [*out.tail[-19:], line]
        if m := _TOTAL.search(line):
            out.total = int(m.group(1))
            self._progress(0, out.total)
        elif m := _STEP.match(line):
            out.steps, out.total = int(m.group(1)), int(m.group(2))
            self._progress(out.steps, out.total)
            if self._at_step is not None and out.steps >= self._at_step and self.thread is None:
                out.contention_from_step = out.steps
                if self._on_step is not None:
                    self.thread = threading.Thread(target=self._on_step, daemon=True)
                    self.thread.start()
        elif m := _ACCURACY.search(line):
            out.accuracy = float(m.group(1)) / 100


def _failed(what: str, outcome: JobOutcome) -> SyncpaceError:
    tail = [line for line in outcome.tail or [] if line.strip()][-3:] or ["(no output)"]
    return SyncpaceError(f"{what}: {' | '.join(tail)}")


def run_local(spec: JobSpec, env: dict[str, str], monitor: Monitor) -> JobOutcome:
    """torchrun with 4 ranks on localhost; ``env`` arms the tracer."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(RANKS),
        "--master-port",
        str(free_port()),
        "-m",
        "syncpace.demo.digits_ddp",
        *spec.args(),
    ]
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert proc.stdout is not None
    reader = threading.Thread(
        target=lambda: [monitor.feed(line.rstrip("\n")) for line in proc.stdout], daemon=True
    )
    reader.start()
    try:
        code = proc.wait(timeout=spec.timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise SyncpaceError(f"the demo job did not finish within {spec.timeout_s:.0f}s") from exc
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        reader.join(timeout=5)
        proc.stdout.close()
    if code != 0:
        raise _failed(f"the demo job failed (exit {code})", monitor.outcome)
    return monitor.outcome


def _kill_group(proc: subprocess.Popen) -> None:
    import os
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass(frozen=True, kw_only=True)
class FabricSettings:
    host_rate: str
    oversubscription: float


class DemoFabric:
    """The demo's leaf-spine (2 leaves x 2 hosts), up for the ``with`` block only."""

    def __init__(self, settings: FabricSettings) -> None:

        self.spec = build_spec(
            {
                "topology": "leaf-spine",
                "leaves": 2,
                "hosts": 2,
                "host_rate": settings.host_rate,
                "oversubscription": settings.oversubscription,
            }
        )
        self.backend = SystemBackend()
        self.state = None

    def __enter__(self) -> DemoFabric:

        self.state = up(self.spec, self.backend)  # removes what it made if it fails
        return self

    def __exit__(self, *exc: object) -> None:

        if self.state is not None:
            down(self.state, self.backend)
            self.state = None

    def describe(self) -> str:
        uplink = self.spec.uplink_rate_bps / 1e6
        return (
            f"leaf-spine of 2 leaves x 2 hosts, hosts at {self.spec.host_rate_bps / 1e6:g} "
            f"Mbit/s, each leaf's uplink {uplink:g} Mbit/s (1:{self.spec.oversubscription:g})"
        )

    def run(
        self, spec: JobSpec, run_dir: Path, env: dict[str, str], monitor: Monitor
    ) -> JobOutcome:
        """One rank per host; greedy flows across the spine once ``monitor`` says so."""

        assert self.state is not None
        flows: list[bulk.Flow] = []

        def start_flows() -> None:
            monitor.outcome.contention_since_ns = time.time_ns()
            try:
                flows.extend(
                    bulk.start_flows(self.state.fabric, CROSS_SPINE, spec.timeout_s, FLOW_PORT)
                )
            except Exception as exc:  # the job goes on; the summary says what failed
                monitor.outcome.contention_error = str(exc)

        monitor._on_step = start_flows
        command = [sys.executable, "-m", "syncpace.demo.digits_ddp", *spec.args()]
        options = RunOptions(timeout_s=spec.timeout_s, grace_s=5.0, master_port=free_port())
        try:
            result = run_job(self.state, command, run_dir, self.backend, options, env, monitor)
        finally:
            if monitor.thread is not None:
                monitor.thread.join(timeout=15)
            for flow in flows:
                flow.stop()
        if result is None or result.returncode != 0:
            reason = "no result" if result is None else result.reason
            raise _failed(f"the demo job on the fabric ended: {reason}", monitor.outcome)
        return monitor.outcome


def uplink_load(run_dir: Path, since_ns: int | None = None) -> tuple[str, float] | None:
    """The busiest uplink direction and its mean utilisation (from ``since_ns``)."""
    import polars as pl

    path = run_dir / LINKS_FILE
    if not path.exists():
        return None
    links = pl.read_ipc_stream(path).filter(pl.col("kind") == "uplink")
    if since_ns is not None:
        links = links.filter(pl.col("time_ns") >= since_ns)
    per = (
        links.group_by("src", "dst")
        .agg(
            (pl.col("bytes").max() - pl.col("bytes").min()).alias("bytes"),
            (pl.col("time_ns").max() - pl.col("time_ns").min()).alias("ns"),
            pl.col("rate_bps").median().alias("rate"),
        )
        .filter(pl.col("ns") > 0)
        .with_columns(util=pl.col("bytes") * 8 / (pl.col("ns") / 1e9) / pl.col("rate"))
        .sort("util", descending=True)
    )
    if per.height == 0:
        return None
    row = per.row(0, named=True)
    return f"{row['src']}→{row['dst']}", float(row["util"])
