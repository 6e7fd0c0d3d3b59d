"""The planted-cause suite: plain PyTorch jobs with one known cause each, traced with no
code change on localhost and across the emulated fabric, diagnosed, and scored.

A :class:`Scenario` says what to run (``job.py`` arguments, the fabric and its faults)
and what the diagnosis must say: the planted cause first, naming exactly the planted
ranks or hosts, and nothing else critical. :func:`run_scenario` runs it (bounded, the
fabric always torn down), :func:`score` judges one diagnosis and :func:`confusion`
tabulates planted against found. ``tests/scenarios/test_planted.py`` runs a short form
in CI; ``benchmarks/scenarios.py`` runs the full form (every scenario twice, both
places) and the counterfactual-versus-rerun check.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syncpace.analysis import Analysis, Severity, Thresholds, analyze
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.ports import free_port

JOB = Path(__file__).resolve().with_name("job.py")
#: what the scorer calls a scenario whose top finding names nothing to fix
HEALTHY = "healthy"


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One planted cause. ``fabric`` is None on localhost, else the spec values of the
    emulated fabric (one host namespace per ``hosts``, ``ranks // hosts`` ranks each)."""

    name: str
    plant: str
    job: tuple[str, ...] = ()
    ranks: int = 4
    hosts: int = 1
    fabric: dict[str, Any] | None = None
    faults: tuple[str, ...] = ()
    flows: tuple[tuple[str, str], ...] = ()  # started once the job trains
    flow_rate: str = ""  # fixed-rate UDP (e.g. "40mbit"); greedy TCP when empty
    flows_after_s: float = 0.0  # ... this long after it started training
    expected: str = HEALTHY
    also: tuple[str, ...] = ()  # further planted causes: found at warning or worse
    expected_ranks: tuple[int, ...] | None = None  # None: not checked
    expected_nodes: tuple[str, ...] | None = None
    #: the same job without the cause (for the counterfactual-versus-rerun check), and
    #: the what-if row that predicts it
    clean: Scenario | None = None
    what_if: str = ""
    timeout_s: float = 240.0

    @property
    def where(self) -> str:
        return "fabric" if self.fabric is not None else "local"

    def replace(self, **changes: Any) -> Scenario:
        return dataclasses.replace(self, **changes)


@dataclass
class Outcome:
    scenario: str
    run: int
    where: str
    planted: str
    top: str
    top_ranks: tuple[int, ...]
    top_nodes: tuple[str, ...]
    first: bool
    named: bool
    false_critical: list[str]
    findings: list[dict[str, Any]] = field(default_factory=list)
    what_if: list[dict[str, Any]] = field(default_factory=list)
    replay_error: float | None = None
    iteration_ms: float = 0.0
    wall_s: float = 0.0
    run_dir: str = ""

    @property
    def passed(self) -> bool:
        return self.first and self.named and not self.false_critical

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "passed": self.passed}


# Running ---------------------------------------------------------------------------------


def run_scenario(sc: Scenario, out: Path, log: Any = None) -> Path:
    """Run ``sc`` traced into ``out`` (replaced); its run directory."""
    if out.exists():
        import shutil

        shutil.rmtree(out)
    out.mkdir(parents=True)
    env = traced_env(out, TraceConfig(dir=str(out)))
    env["OMP_NUM_THREADS"] = "1"
    if sc.fabric is None:
        _run_local(sc, out, env, log)
    else:
        _run_fabric(sc, out, env, log)
    return out


def _job_command(sc: Scenario, per_host: int, port: int | None) -> list[str]:
    if per_host == 1 and sc.fabric is not None:
        return [sys.executable, str(JOB), *sc.job]
    head = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(per_host)]
    if port is not None:
        head += ["--master-port", str(port)]
    return [*head, str(JOB), *sc.job]


def _run_local(sc: Scenario, out: Path, env: dict[str, str], log: Any) -> None:
    cmd = _job_command(sc, sc.ranks, free_port())
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        text, _ = proc.communicate(timeout=sc.timeout_s)
    except subprocess.TimeoutExpired as exc:
        _kill(proc)
        raise RuntimeError(
            f"{sc.name}: the job did not finish within {sc.timeout_s:.0f} s"
        ) from exc
    if log is not None:
        log.write(text)
    if proc.returncode != 0:
        tail = " | ".join(line for line in text.splitlines()[-4:] if line.strip())
        raise RuntimeError(f"{sc.name}: the job failed (exit {proc.returncode}): {tail}")


def _kill(proc: subprocess.Popen) -> None:
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=5)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


class _Sink:
    """The hosts' output into ``log``; ``on_start`` once rank 0 says it trains."""

    def __init__(self, log: Any, on_start: Any) -> None:
        self.log, self.on_start, self.started = log, on_start, False

    def write(self, text: str) -> int:
        if self.log is not None:
            self.log.write(text)
        if not self.started and "scenario job: started" in text:
            self.started = True
            if self.on_start is not None:
                self.on_start()
        return len(text)

    def flush(self) -> None:
        if self.log is not None:
            self.log.flush()


def _run_fabric(sc: Scenario, out: Path, env: dict[str, str], log: Any) -> None:
    from syncpace.fabric import build_spec, bulk
    from syncpace.fabric.backend import SystemBackend
    from syncpace.fabric.faults import parse_fault
    from syncpace.fabric.lifecycle import down, up
    from syncpace.fabric.runner import RunOptions, run_job
    from syncpace.fabric.spec import parse_rate

    assert sc.fabric is not None
    backend = SystemBackend()
    spec = build_spec({**sc.fabric, "name": "ps" + secrets.token_hex(3)})
    state = up(spec, backend)
    flows: list[Any] = []
    starters: list[threading.Thread] = []
    try:
        rate = parse_rate(sc.flow_rate) if sc.flow_rate else None

        def start_flows() -> None:
            if sc.flows:
                flows.extend(
                    bulk.start_flows(state.fabric, list(sc.flows), sc.timeout_s, 5601, rate)
                )

        per_host = sc.ranks // sc.hosts
        options = RunOptions(
            timeout_s=sc.timeout_s,
            grace_s=5.0,
            master_port=free_port(),
            faults=[parse_fault(f) for f in sc.faults],
        )
        command = _job_command(sc, per_host, None)
        result = run_job(state, command, out, backend, options, env, _Sink(log, start_flows))
        if result is None or result.returncode != 0:
            reason = "no result" if result is None else result.reason
            if not _complete(out, sc.ranks):
                raise RuntimeError(f"{sc.name}: the job on the fabric ended: {reason}")
    finally:
        for starter in starters:
            starter.join(timeout=sc.flows_after_s + 15)
        for flow in flows:
            flow.stop()
        down(state, backend)


def _complete(run_dir: Path, ranks: int) -> bool:
    from syncpace.trace import load_trace

    try:
        return load_trace(run_dir).steps["rank"].n_unique() == ranks
    except Exception:
        return False


# Judging ----------------------------------------------------------------------------------


def diagnose(run_dir: Path, link_gbps: float = 0.0, **kw: Any) -> Analysis:
    return analyze(run_dir, Thresholds(link_gbps=link_gbps), **kw)


def score(sc: Scenario, analysis: Analysis, run: int = 1, run_dir: str = "") -> Outcome:
    """Was the planted cause first, naming exactly the planted ranks/hosts, with no other
    critical finding?"""
    findings = [f for f in analysis.findings if f.mode not in ("clock_uncertainty",)]
    # what the diagnosis names as the cause: its first finding that is no symptom
    causes = [f for f in findings if not f.symptom]
    top = causes[0] if causes else analysis.top
    found = HEALTHY if top.severity < Severity.WARNING or top.mode == "healthy" else top.mode
    planted = {sc.expected, *sc.also}
    serious = {f.mode for f in findings if f.severity >= Severity.WARNING}
    # two causes at once: either may come first (their costs decide), both must be found
    first = found in planted and all(m in serious for m in planted - {HEALTHY, found})
    named = True
    cause = next((f for f in findings if f.mode == sc.expected), None)
    if first and sc.expected_ranks is not None:
        named = cause is not None and tuple(sorted(cause.ranks)) == tuple(sorted(sc.expected_ranks))
    if first and named and sc.expected_nodes is not None:
        named = cause is not None and tuple(sorted(cause.nodes)) == tuple(sorted(sc.expected_nodes))
    false_critical = [
        f.mode
        for f in findings
        if f.severity == Severity.CRITICAL and f.mode not in planted and not f.symptom
    ]
    run_metrics = analysis.runs[0]
    what_if = analysis.what_if[0] if getattr(analysis, "what_if", None) else None
    return Outcome(
        scenario=sc.name,
        run=run,
        where=sc.where,
        planted=sc.expected,
        top=found,
        top_ranks=tuple(top.ranks),
        top_nodes=tuple(top.nodes),
        first=first,
        named=named,
        false_critical=false_critical,
        findings=[f.to_json() for f in findings],
        what_if=what_if.to_json()["rows"] if what_if is not None else [],
        replay_error=what_if.replay_error if what_if is not None else None,
        iteration_ms=run_metrics.iteration_ns / 1e6,
        run_dir=run_dir,
    )


def confusion(outcomes: list[Outcome]) -> tuple[list[str], list[str], dict[tuple[str, str], int]]:
    """Rows: planted causes; columns: what the diagnosis put first."""
    counts = Counter((o.planted, o.top) for o in outcomes)
    rows = sorted({o.planted for o in outcomes})
    cols = sorted({o.top for o in outcomes} | set(rows))
    return rows, cols, dict(counts)


def confusion_text(outcomes: list[Outcome]) -> str:
    rows, cols, counts = confusion(outcomes)
    short = {c: c[:10] for c in cols}
    width = max(len(r) for r in rows) + 2
    lines = [
        "planted \\ found".ljust(width) + " ".join(short[c].rjust(10) for c in cols),
    ]
    for r in rows:
        cells = " ".join(str(counts.get((r, c), 0) or ".").rjust(10) for c in cols)
        lines.append(r.ljust(width) + cells)
    return "\n".join(lines)


def save(outcomes: list[Outcome], path: Path) -> None:
    path.write_text(json.dumps([o.to_json() for o in outcomes], indent=1, default=str))


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    start = time.monotonic()
    value = fn(*args)
    return value, time.monotonic() - start


def bench_link(hosts: int, rate: str, out: Path, log: Any = None) -> tuple[float, float]:
    """(alpha_us, busbw GB/s) of an all-reduce benchmark on a star of ``hosts`` at
    ``rate``: what ``syncpace diagnose --bench`` would use as the link."""
    from syncpace.bench.on_fabric import bench_on_fabric
    from syncpace.bench.results import main_fit
    from syncpace.fabric import build_spec
    from syncpace.fabric.backend import SystemBackend
    from syncpace.fabric.lifecycle import down, up

    spec = build_spec(
        {"topology": "star", "hosts": hosts, "host_rate": rate, "name": "pb" + secrets.token_hex(3)}
    )
    state = up(spec, SystemBackend())
    args = ["all_reduce", "-b", "64K", "-e", "4M", "-f", "2", "-n", "5", "-w", "2"]
    try:
        data = bench_on_fabric(
            state, [*args, "--gap-ms", "50", "--no-pairs", "--no-check"], out, echo=log
        )
    finally:
        down(state, SystemBackend())
    _, fit = main_fit(data) or ("", {})
    return float(fit.get("alpha_us", 0.0)), float(fit["beta_gbps"])


def phase_traces(run_dir: Path, lengths: list[int]) -> list[Any]:
    """The trace of a ``--phases`` job cut into one trace per phase (steps renumbered
    from 0, so each phase's first step is its warm-up)."""
    import polars as pl

    from syncpace.trace import load_trace
    from syncpace.trace.reader import Trace

    trace = load_trace(run_dir)
    out, start = [], 0
    for n in lengths:
        keep = pl.col("step").is_between(start, start + n - 1)
        shift = pl.col("step") - start
        out.append(
            Trace(
                path=run_dir / f"phase-{len(out)}",
                world_size=trace.world_size,
                meta=trace.meta,
                events=trace.events.filter(keep).with_columns(step=shift),
                steps=trace.steps.filter(keep).with_columns(step=shift),
                warnings=trace.warnings,
            )
        )
        start += n
    return out
