"""The planted-cause suite: plain PyTorch jobs with one known cause each, traced with no
code change on localhost and across the emulated fabric, diagnosed, and scored.

A :class:`Scenario` is one job (``job.py``) that alternates clean and planted phases:
warm-up, clean, planted, clean, planted, clean. The plant is a job argument (a slow
rank, jitter, a stall, small calls, late buckets) or a fabric fault switched on for the
planted phases only (a link's rate, a host's CPU cap, background flows), so each
planted phase has the same job without its cause right before and after it, under the
same load of the machine. Every phase's trace is diagnosed on its own: a planted phase
must put its cause first, naming exactly the planted ranks or hosts, with no other
critical cause; a clean phase must find no cause. :func:`confusion` tabulates planted
against found; :func:`predict` checks a planted phase's counterfactual (its cause
removed in a replay) against the measured clean phases around it.

``tests/scenarios/test_planted.py`` runs a short form in CI, each planted phase judged
against the clean phases of the same run (:func:`measure_noise`, :func:`score_against`);
``benchmarks/scenarios.py`` the full form.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syncpace.analysis import Analysis, Severity
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.ports import free_port

JOB = Path(__file__).resolve().with_name("job.py")
#: what the scorer calls a phase whose diagnosis names no cause
HEALTHY = "healthy"
CLEAN, PLANTED, WARMUP = "clean", "planted", "warm-up"


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One planted cause. ``fabric`` is None on localhost, else the spec values of the
    emulated fabric (one host namespace per ``hosts``, ``ranks // hosts`` ranks each)."""

    name: str
    plant: str
    job: tuple[str, ...] = ()
    plants: dict[str, Any] = field(default_factory=dict)  # job plants of planted phases
    clean_plants: dict[str, Any] = field(default_factory=dict)  # ... and of clean ones
    score_clean: bool = True  # clean phases are judged too
    clean_expected: str = HEALTHY  # what a clean phase must find first
    ranks: int = 4
    hosts: int = 1
    fabric: dict[str, Any] | None = None
    faults: tuple[str, ...] = ()  # "rate LINK RATE" or "straggler HOST FRACTION"
    flows: tuple[tuple[str, str], ...] = ()  # background flows of planted phases
    flow_rate: str = ""  # fixed-rate UDP (e.g. "40mbit"); greedy TCP when empty
    flows_after_s: float = 0.0  # ... from this long into the phase
    expected: str = HEALTHY
    also: tuple[str, ...] = ()  # further planted causes: found at warning or worse
    expected_ranks: tuple[int, ...] | None = None  # None: not checked
    expected_nodes: tuple[str, ...] | None = None
    what_if: str = ""  # the what-if row that predicts the clean phases
    steps: int = 20  # per phase
    warmup: int = 6
    timeout_s: float = 300.0
    plan: tuple[tuple[str, int, dict[str, Any]], ...] = ()  # explicit phases, if given

    @property
    def where(self) -> str:
        return "fabric" if self.fabric is not None else "local"

    @property
    def planted(self) -> bool:
        return bool(self.plants or self.faults or self.flows)

    def phases(self) -> list[tuple[str, int, dict[str, Any]]]:
        """(kind, steps, job plants) of each phase, in order."""
        if self.plan:
            return list(self.plan)
        body = [CLEAN, PLANTED, CLEAN, PLANTED, CLEAN] if self.planted else [CLEAN] * 4
        return [(WARMUP, self.warmup, dict(self.clean_plants))] + [
            (kind, self.steps, self.plants if kind == PLANTED else self.clean_plants)
            for kind in body
        ]

    def replace(self, **changes: Any) -> Scenario:
        return dataclasses.replace(self, **changes)


@dataclass
class Outcome:
    scenario: str
    run: int
    phase: int
    kind: str
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
    run_dir: str = ""
    effect: float = 0.0  # the planted cause's replayed saving (0: not found)
    causes: list[tuple[str, float]] = field(default_factory=list)  # (mode, cost), ranked

    @property
    def passed(self) -> bool:
        return self.first and self.named and not self.false_critical

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "passed": self.passed}


# Running ---------------------------------------------------------------------------------


def run_scenario(sc: Scenario, out: Path, log: Any = None) -> Path:
    """Run ``sc`` traced into ``out`` (replaced); its run directory."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    env = traced_env(out, TraceConfig(dir=str(out)))
    env["OMP_NUM_THREADS"] = "1"
    if sc.fabric is None:
        _run_local(sc, out, env, log)
    else:
        _run_fabric(sc, out, env, log)
    return out


def job_args(sc: Scenario) -> list[str]:
    plan = [{"steps": n, **plants} for _, n, plants in sc.phases()]
    return [*sc.job, "--phases", json.dumps(plan)]


def _job_command(sc: Scenario, per_host: int, port: int | None) -> list[str]:
    if per_host == 1 and sc.fabric is not None:
        return [sys.executable, str(JOB), *job_args(sc)]
    head = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(per_host)]
    if port is not None:
        head += ["--master-port", str(port)]
    return [*head, str(JOB), *job_args(sc)]


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
        raise RuntimeError(f"{sc.name}: no end within {sc.timeout_s:.0f} s") from exc
    if log is not None:
        log.write(text)
    if proc.returncode != 0:
        raise RuntimeError(f"{sc.name}: the job failed (exit {proc.returncode}): {_why(text)}")


#: Lines of a rank's own output that say why it died (torchrun's summary only says how).
_CAUSE = ("terminate called", "what():", "Error", "Exception", "Traceback", "Fatal")


def _why(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    causes = [line.strip() for line in lines if any(c in line for c in _CAUSE)][:6]
    return " | ".join(causes + lines[-4:])


def _kill(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=5)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


class _Plants:
    """The fabric faults and flows of a scenario, in force during its planted phases:
    switched as rank 0 announces each phase (``scenario job: phase K``), and then, once
    they are (every flow's sender sending), ``READY_DIR/phase-K`` made for the job,
    which waits for it before the phase's steps: starting a flow takes about a second
    of Python starting in the namespaces, longer than a fast job's phase."""

    def __init__(self, sc: Scenario, state: Any, log: Any, ready: Path | None = None) -> None:
        self.sc, self.state, self.log, self.ready = sc, state, log, ready
        self.kinds = [kind for kind, _, _ in sc.phases()]
        self.on = False
        self.flows: list[Any] = []
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._generation = 0

    def write(self, text: str) -> int:
        if self.log is not None:
            self.log.write(text)
        for line in text.splitlines():
            if "scenario job: phase " in line:
                k = int(line.rsplit(" ", 1)[1])
                thread = threading.Thread(target=self.enter, args=(k,), daemon=True)
                thread.start()
                self.threads.append(thread)
        return len(text)

    def flush(self) -> None:
        if self.log is not None:
            self.log.flush()

    def enter(self, k: int) -> None:
        want = k < len(self.kinds) and self.kinds[k] == PLANTED
        with self._lock:
            self._generation += 1
            generation = self._generation
            try:
                if want and not self.on:
                    self._faults(True)
                    self.on = True
                elif not want and self.on:
                    self._faults(False)
                    self._stop_flows()
                    self.on = False
            except Exception as exc:  # reported with the run
                self.errors.append(f"phase {k}: {exc}")
        later = want and self.sc.flows and self.sc.flows_after_s > 0
        if later:  # flows meant to start within the phase: the steps go on meanwhile
            self._in_force(k)
            time.sleep(self.sc.flows_after_s)
        if want and self.sc.flows:
            with self._lock:
                if self.on and generation == self._generation and not self.flows:
                    try:
                        self._start_flows()
                    except Exception as exc:  # reported with the run
                        self.errors.append(f"phase {k}: {exc}")
        if not later:
            self._in_force(k)

    def _in_force(self, k: int) -> None:
        if self.ready is not None:
            (self.ready / f"phase-{k}").touch()

    def _faults(self, on: bool) -> None:
        from syncpace.fabric import cgroup
        from syncpace.fabric.backend import SystemBackend
        from syncpace.fabric.plan import set_rate_plan
        from syncpace.fabric.spec import parse_rate

        fabric = self.state.fabric
        for fault in self.sc.faults:
            action, target, value = fault.split()
            if action == "rate":
                link = fabric.link(target)
                rate = parse_rate(value) if on else link.rate_bps
                for command in set_rate_plan(fabric, link, rate):
                    SystemBackend().run(command.argv)
            elif action == "straggler":
                path = cgroup.base_dir(self.state.name) / target
                cgroup.set_cpu_limit(path, float(value) if on else None)

    def _start_flows(self) -> None:
        from syncpace.fabric import bulk
        from syncpace.fabric.spec import parse_rate

        rate = parse_rate(self.sc.flow_rate) if self.sc.flow_rate else None
        pairs = list(self.sc.flows)
        self.flows = bulk.start_flows(
            self.state.fabric, pairs, self.sc.timeout_s, 5601, rate, sending=True
        )

    def _stop_flows(self) -> None:
        for flow in self.flows:
            flow.stop()
        self.flows = []

    def close(self) -> None:
        for thread in self.threads:
            thread.join(timeout=self.sc.flows_after_s + 20)
        with self._lock:
            if self.on:
                try:
                    self._faults(False)
                except Exception as exc:
                    self.errors.append(f"undo: {exc}")
            self._stop_flows()
            self.on = False


def _run_fabric(sc: Scenario, out: Path, env: dict[str, str], log: Any) -> None:
    from syncpace.fabric import build_spec
    from syncpace.fabric.backend import SystemBackend
    from syncpace.fabric.faults import parse_fault
    from syncpace.fabric.lifecycle import down, up
    from syncpace.fabric.runner import RunOptions, run_job

    assert sc.fabric is not None
    backend = SystemBackend()
    spec = build_spec({**sc.fabric, "name": "ps" + secrets.token_hex(3)})
    state = up(spec, backend)
    ready = out / "plants-ready"
    ready.mkdir()
    plants = _Plants(sc, state, log, ready)
    try:
        # a CPU cap needs the hosts' cgroups: a straggler fault that never fires makes them
        parked = [
            parse_fault(f"straggler {f.split()[1]} 1 at=100000")
            for f in sc.faults
            if f.startswith("straggler")
        ]
        options = RunOptions(
            timeout_s=sc.timeout_s, grace_s=5.0, master_port=free_port(), faults=parked
        )
        command = [*_job_command(sc, sc.ranks // sc.hosts, None), "--ready-dir", str(ready)]
        result = run_job(state, command, out, backend, options, env, plants)
        if result is None or result.returncode != 0:
            reason = "no result" if result is None else result.reason
            if not _complete(out, sc.ranks):
                raise RuntimeError(f"{sc.name}: the job on the fabric ended: {reason}")
    finally:
        plants.close()
        down(state, backend)
    if plants.errors:
        raise RuntimeError(f"{sc.name}: planting failed: {plants.errors[0]}")


def _complete(run_dir: Path, ranks: int) -> bool:
    from syncpace.trace import load_trace

    try:
        return load_trace(run_dir).steps["rank"].n_unique() == ranks
    except Exception:
        return False


def phase_traces(run_dir: Path, lengths: list[int]) -> list[Any]:
    """The trace of a ``--phases`` job cut into one trace per phase (steps renumbered
    from 0, so each phase's first step is its warm-up)."""
    import polars as pl

    from syncpace.trace import load_trace
    from syncpace.trace.reader import Trace
    from syncpace.trace.schema import LINKS_FILE

    trace = load_trace(run_dir)
    out, start = [], 0
    for n in lengths:
        keep = pl.col("step").is_between(start, start + n - 1)
        shift = pl.col("step") - start
        steps = trace.steps.filter(keep)
        # the hosts' counters of the phase's span (a fault is in force in its phase only)
        t0, t1 = steps["start_ns"].min(), steps["end_ns"].max()
        counters = trace.counters
        if steps.height and counters.height:
            counters = counters.filter(pl.col("time_ns").is_between(t0, t1))
        path = run_dir / f"phase-{len(out)}"
        links = run_dir / LINKS_FILE
        if links.is_file():  # the fabric's link counters, read by the phase's own window
            path.mkdir(exist_ok=True)
            if not (path / LINKS_FILE).exists():
                (path / LINKS_FILE).symlink_to(links)
        out.append(
            Trace(
                path=path,
                world_size=trace.world_size,
                meta=trace.meta,
                events=trace.events.filter(keep).with_columns(step=shift),
                steps=steps.with_columns(step=shift),
                warnings=trace.warnings,
                counters=counters,
                hosts=trace.hosts,
            )
        )
        start += n
    return out


# Judging ----------------------------------------------------------------------------------


def score(
    sc: Scenario,
    analysis: Analysis,
    run: int = 1,
    run_dir: str = "",
    phase: int = 0,
    kind: str = PLANTED,
) -> Outcome:
    """Was the planted cause first among the causes, naming exactly the planted
    ranks/hosts, with no other critical cause?"""
    findings = [f for f in analysis.findings if f.mode not in ("clock_uncertainty",)]
    # what the diagnosis names as the cause: its first finding that is no symptom
    causes = [f for f in findings if not f.symptom]
    top = causes[0] if causes else analysis.top
    serious_cause = causes and top.severity >= Severity.WARNING and top.mode != "healthy"
    found = top.mode if serious_cause else HEALTHY
    planted = {sc.expected, *sc.also}
    serious = {f.mode for f in findings if f.severity >= Severity.WARNING}
    # two causes at once: either may come first (their costs decide), both must be found
    first = found in planted and all(m in serious for m in planted - {HEALTHY, found})
    named = True
    cause = next((f for f in findings if f.mode == sc.expected), None)
    if first and sc.expected_ranks is not None:
        named = cause is not None and sorted(cause.ranks) == sorted(sc.expected_ranks)
    if first and named and sc.expected_nodes is not None:
        named = cause is not None and sorted(cause.nodes) == sorted(sc.expected_nodes)
    false_critical = [
        f.mode
        for f in findings
        if f.severity == Severity.CRITICAL and f.mode not in planted and not f.symptom
    ]
    table = analysis.what_if[0] if analysis.what_if else None
    return Outcome(
        scenario=sc.name,
        run=run,
        phase=phase,
        kind=kind,
        where=sc.where,
        planted="+".join(sorted(planted)),
        top=found,
        top_ranks=tuple(top.ranks),
        top_nodes=tuple(top.nodes),
        first=first,
        named=named,
        false_critical=false_critical,
        findings=[f.to_json() for f in findings],
        what_if=table.to_json()["rows"] if table is not None else [],
        replay_error=table.replay_error if table is not None else None,
        iteration_ms=analysis.runs[0].iteration_ns / 1e6,
        run_dir=run_dir,
    )


#: What a loaded machine does to a clean job by itself: compute jitter, its cost the
#: no-jitter counterfactual's saving, or, where the host sampler sees the job's threads
#: wait for a CPU, CPU starvation (the same time, named by its cause).
MACHINE_NOISE = ("sync_amplification", "cpu_starvation")
#: A cause stands above the noise when its saving exceeds the clean phases' saving of
#: the same counterfactual by this much, and by that saving again (twice the noise).
NOISE_MARGIN = 0.03


def causes_found(analysis: Analysis) -> list[tuple[str, float]]:
    """(mode, cost) of every cause the diagnosis reports at warning or worse, ranked."""
    return [
        (f.mode, round(f.cost, 4))
        for f in analysis.findings
        if not f.symptom
        and f.severity >= Severity.WARNING
        and f.mode not in ("healthy", "clock_uncertainty")
    ]


@dataclass
class Noise:
    """What the clean phases of one run, measured side by side with its planted ones,
    lose to each counterfactual: per cause the largest saving any clean phase shows."""

    savings: dict[str, float]  # per cause, the largest saving in a clean phase
    spread: dict[str, float]  # ... and how far the clean phases' savings differ
    iteration_ms: list[float]
    load: float

    def of(self, mode: str) -> float:
        return self.savings.get(mode, 0.0)

    def need(self, mode: str) -> float:
        """The saving a cause must reach to stand well above this noise: the clean
        phases' largest, plus twice their spread and at least ``NOISE_MARGIN``."""
        return self.of(mode) + max(NOISE_MARGIN, 2 * self.spread.get(mode, 0.0))

    def above(self, mode: str, cost: float) -> bool:
        return cost >= self.need(mode)

    def describe(self) -> str:
        parts = ", ".join(
            f"{m} {v:.1%}±{self.spread.get(m, 0.0):.1%}"
            for m, v in sorted(self.savings.items())
            if v > 0
        )
        its = ", ".join(f"{v:.1f}" for v in self.iteration_ms)
        return (
            f"clean phases: iterations {its} ms; their savings (noise) {parts or 'none'}; "
            f"load average {self.load:.1f}"
        )


def _row(analysis: Analysis, *prefixes: str) -> float:
    table = analysis.what_if[0] if analysis.what_if else None
    if table is None:
        return 0.0
    got = [r.saving for r in table.rows if r.name.split(":")[0] in prefixes]
    return max(got, default=0.0)


def measure_noise(clean: list[Analysis], load: float = 0.0) -> Noise:
    """The noise of a run from its clean phases: per cause, the largest saving of its
    counterfactual in any of them — the no-jitter row for jitter and one-off stalls,
    the slowest rank computing like the others for stragglers, ideal overlap for poor
    overlap — and the cost of any cause a clean phase reports."""
    seen: dict[str, list[float]] = {}
    for a in clean:
        each = {
            "sync_amplification": _row(a, "jitter"),
            "stall": _row(a, "jitter"),
            "straggler": _row(a, "slowest", "straggler"),
            "poor_overlap": _row(a, "overlap"),
        }
        for mode, cost in causes_found(a):
            each[mode] = max(each.get(mode, 0.0), cost)
        for mode, value in each.items():
            seen.setdefault(mode, []).append(float(value))
    savings = {m: max(v) for m, v in seen.items()}
    spread = {m: max(v) - min(v) if len(v) == len(clean) else max(v) for m, v in seen.items()}
    iterations = [a.runs[0].iteration_ns / 1e6 for a in clean]
    return Noise(savings, spread, iterations, load)


def score_against(sc: Scenario, analysis: Analysis, noise: Noise) -> Outcome:
    """:func:`score` with the run's clean phases as the reference: causes whose saving
    the clean phases show too (within ``noise``) are the machine's, not the job's; the
    planted cause must come first among the others, stand above the noise, name the
    planted ranks, and no other cause above the noise may be critical."""
    outcome = score(sc, analysis)
    causes = causes_found(analysis)
    real = [(m, c) for m, c in causes if m == sc.expected or noise.above(m, c)]
    planted = next((c for m, c in causes if m == sc.expected), 0.0)
    top = real[0][0] if real else HEALTHY
    first = top == sc.expected and noise.above(sc.expected, planted)
    cause = next((f for f in analysis.findings if f.mode == sc.expected), None)
    named = True
    if first and sc.expected_ranks is not None:
        named = cause is not None and sorted(cause.ranks) == sorted(sc.expected_ranks)
    critical = {
        f.mode
        for f in analysis.findings
        if f.severity == Severity.CRITICAL and not f.symptom and f.mode != sc.expected
    }
    false_critical = [m for m, c in real if m in critical]
    top_finding = next((f for f in analysis.findings if f.mode == top), None)
    return dataclasses.replace(
        outcome,
        top=top,
        top_ranks=tuple(top_finding.ranks) if top_finding else (),
        first=first,
        named=named,
        false_critical=false_critical,
        effect=planted,
        causes=causes,
    )


def clean_of(sc: Scenario) -> Scenario:
    """What a clean phase of ``sc`` must show: no cause, or the cause the job has
    without the plant (large transfers on slow links are bandwidth-bound)."""
    return sc.replace(expected=sc.clean_expected, also=(), expected_ranks=None, expected_nodes=None)


def confusion(outcomes: list[Outcome]) -> tuple[list[str], list[str], dict[tuple[str, str], int]]:
    """Rows: planted causes; columns: what the diagnosis put first."""
    counts = Counter((o.planted, o.top) for o in outcomes)
    rows = sorted({o.planted for o in outcomes})
    cols = sorted({o.top for o in outcomes} | set(rows))
    return rows, cols, dict(counts)


def confusion_text(outcomes: list[Outcome]) -> str:
    """The confusion matrix as text: one column per cause found first (numbered, with a
    legend, so long names stay readable)."""
    rows, cols, counts = confusion(outcomes)
    width = max(len(r) for r in rows) + 2
    lines = ["planted \\ found".ljust(width) + "".join(f"{i + 1:>5}" for i in range(len(cols)))]
    for r in rows:
        cells = "".join(f"{counts.get((r, c), 0) or '.':>5}" for c in cols)
        lines.append(r.ljust(width) + cells)
    lines.append("found: " + ", ".join(f"{i + 1} {c}" for i, c in enumerate(cols)))
    return "\n".join(lines)


def fabric_key(fabric: dict[str, Any]) -> str:
    """A fabric's shape in a few characters: ``star-2x200mbit``,
    ``leaf-spine-2x1x200mbit-2:1`` (leaves x hosts per leaf, oversubscription)."""
    if fabric["topology"] == "star":
        return f"star-{fabric['hosts']}x{fabric['host_rate']}"
    over = f"{float(fabric.get('oversubscription', 1.0)):g}:1"
    return f"{fabric['topology']}-{fabric['leaves']}x{fabric['hosts']}x{fabric['host_rate']}-{over}"


def bench_link(fabric: dict[str, Any], out: Path, log: Any = None) -> tuple[float, float]:
    """(alpha_us, busbw GB/s) of an all-reduce benchmark across every host of
    ``fabric`` (a fabric spec: topology, hosts, rates, oversubscription), one rank a
    host: what ``syncpace diagnose --bench`` would use as the link of a job there, its
    shared links' capacity included."""
    from syncpace.bench.config import BenchConfig
    from syncpace.bench.on_fabric import bench_on_fabric
    from syncpace.bench.results import main_fit
    from syncpace.fabric import build_spec
    from syncpace.fabric.backend import SystemBackend
    from syncpace.fabric.lifecycle import down, up

    name = "pb" + secrets.token_hex(3)
    spec = build_spec({**fabric, "name": name})
    state = up(spec, SystemBackend())
    config = BenchConfig(
        ops="all_reduce",
        min_bytes="64K",
        max_bytes="4M",
        step_factor=2,
        iters=5,
        warmup=2,
        gap_ms=50,
        pairs=False,
        check=False,
        timeout_s=120,
    )
    try:
        data = bench_on_fabric(state, config, out, echo=log)
    finally:
        down(state, SystemBackend())
    _, fit = main_fit(data) or ("", {})
    return float(fit.get("alpha_us", 0.0)), float(fit["beta_gbps"])


def predict(analysis: Analysis, name: str) -> float | None:
    """The mean iteration (ms) a replay predicts with the cause ``name`` removed: the
    what-if row of that name, or, when the diagnosis named something else, the same
    counterfactual built for the planted ranks (so the replay is checked even where the
    detection missed); planted jitter removed with its tail."""
    table = analysis.what_if[0] if analysis.what_if else None
    if table is None:
        return None
    row = table.row(name)
    if row is not None and name != "jitter":
        return row.iteration_ns / 1e6
    change = planted_change(analysis, name)
    if change is None:
        return None
    from syncpace.analysis.replay.whatif import evaluate

    prog = analysis.runs[0].program
    return evaluate(prog, table.base, name, name, change).iteration_ns / 1e6


def planted_change(analysis: Analysis, name: str) -> Any:
    """The counterfactual :func:`predict` builds for ``name`` (a cause kind, optionally
    with its ranks: ``straggler:2``) when no what-if row of that name stands for it;
    None for a name it cannot build or without a replay."""
    # The jitter row keeps the one-off stalls (the stall finding's); a planted heavy
    # tail makes some, and the job without the plant has neither: both are removed.
    from syncpace.analysis.replay import counterfactuals as cf

    run = analysis.runs[0]
    prog, th = run.program, analysis.thresholds
    if prog is None:
        return None
    kind, _, rest = name.partition(":")
    chosen = [int(r) for r in rest.split(",") if r.isdigit()]
    if kind in ("straggler", "locality_variance"):
        return cf.without_excess(prog, chosen)
    if kind == "cpu_starvation":
        return cf.combine([cf.without_excess(prog, chosen), cf.without_jitter(prog)])
    if kind == "slow_link":
        change = cf.exits_aligned(prog, chosen)
        if th.link_gbps > 0:
            rate = cf.transfers_at_rate(prog, th.link_gbps, th.link_alpha_us * 1e3)
            change = cf.combine([change, rate])
        return change
    if kind == "links" and th.link_gbps > 0:
        return cf.transfers_at_rate(prog, th.link_gbps, th.link_alpha_us * 1e3)
    if kind == "links":
        return cf.transfers_at_best(prog)
    if kind in ("jitter", "stall"):
        return cf.without_jitter(prog)
    return None


def row_changes(analysis: Analysis) -> dict[str, Any]:
    """Every what-if row's counterfactual change by row name, as the diagnosis built
    them (its detectors and generic rows run again on the first run's metrics: the
    what-if table keeps outcomes, not changes)."""
    from syncpace.analysis.detectors import DETECTORS, Context
    from syncpace.analysis.diagnosis import generic_counterfactuals

    ctx = Context(analysis.runs[0], analysis.thresholds, None)
    for detector in DETECTORS:
        detector(ctx)
    generic_counterfactuals(ctx)
    return {name: change for name, (_, change) in ctx.replays.items()}


def costliest_row(table: Any, mode: str, among: Any = None) -> Any:
    """The what-if row of cause ``mode`` that saves most (the finding's own
    counterfactual), of the rows named in ``among`` where given; None where there is
    none. One pick for one planted cause and for several."""
    own = [r for r in table.rows if r.cause == mode and (among is None or r.name in among)]
    return max(own, key=lambda r: r.saving) if own else None


def predict_together(analysis: Analysis, parts: list[tuple[str, str]]) -> float | None:
    """The mean iteration (ms) the replay predicts with several planted causes removed
    at once. Each part is (mode, fallback): the costliest what-if row of that cause
    mode (the finding's own counterfactual), else the counterfactual :func:`predict`
    builds for ``fallback``; their changes combined. Only the planted causes go: the
    job's own shape (its overlap, its bytes), which the rerun without the plants keeps,
    stays, where "all causes found removed" would take it too."""
    from syncpace.analysis.replay import counterfactuals as cf
    from syncpace.analysis.replay.whatif import evaluate

    table = analysis.what_if[0] if analysis.what_if else None
    prog = analysis.runs[0].program
    if table is None or prog is None:
        return None
    built = row_changes(analysis)
    changes = []
    for mode, fallback in parts:
        # as predict() does for one cause: planted jitter with its tail, the rest by
        # the finding's own row, else the row or counterfactual of the planted place
        own = costliest_row(table, mode, built)
        if fallback == "jitter":
            change = planted_change(analysis, fallback)
        elif own is not None:
            change = built[own.name]
        elif fallback in built:
            change = built[fallback]
        else:
            change = planted_change(analysis, fallback) if fallback else None
        if change is None:
            return None
        changes.append(change)
    made = cf.combine(changes)
    return (
        evaluate(prog, table.base, "planted", "the planted causes removed", made).iteration_ns / 1e6
    )
