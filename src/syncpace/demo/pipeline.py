"""``syncpace demo``: a real DDP job with planted problems, traced, explained, paced and
simulated at scale.

Phases: (1) train the digits MLP on 4 gloo ranks under the tracer, with a planted
straggler (rank ``slow_rank`` spends ``slow_ms`` more every step) and, across the
emulated fabric when run as root, greedy flows over the spine from ``contention_step``
on; (2) diagnose the trace; (3) train again with the pacer on under its A/B guard;
(4) calibrate the simulator from the trace and replay the trace with it (the check:
within 5 % in mean and 0.03 in CV), then, only when it passes, simulate the same job at
8-256 nodes with and without pacing; (5) write ``report.html`` (both runs) and
``scaling.html`` (the study, or the check and why the study is withheld).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from syncpace.analysis.api import Analysis
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import prepare_run_dir, traced_env
from syncpace.config import check_numbers, setting
from syncpace.console import make_console
from syncpace.control.config import PacingConfig
from syncpace.demo.job import DemoFabric, FabricSettings, JobSpec, Monitor, run_local, uplink_load
from syncpace.diagnose import DiagnoseSettings, diagnose_runs
from syncpace.errors import FabricError, PlotlyMissing, SyncpaceError
from syncpace.report.html import write_html
from syncpace.report.scaling_page import Measured, write_scaling_page
from syncpace.report.terminal import pacing_line
from syncpace.sim import scenario as sc
from syncpace.sim.calibrate import calibrate
from syncpace.sim.check import ReplayCheck, replay_check
from syncpace.sim.study import run_study, withheld_page
from syncpace.sim.topology import TopologySpec
from syncpace.trace.reader import load_trace
from syncpace.trace.summary import pacing_summary

SCENARIO = Path(__file__).resolve().parent / "scaling.toml"


@dataclass(kw_only=True, slots=True)
class DemoConfig:
    out: str = setting("syncpace-demo", "Directory for the demo's traces and reports.")
    fabric: bool = setting(
        True, "As root, run across an emulated leaf-spine fabric (--no-fabric: on localhost)."
    )
    epochs: int = setting(4, "Passes over the digits training set (11 steps each).")
    max_steps: int = setting(0, "Stop each training run after this many steps (0: all epochs).")
    slow_rank: int = setting(2, "The planted straggler's rank (on the fabric: host h<rank>).")
    slow_ms: float = setting(80.0, "Extra time the straggler spends every step.")
    host_rate: str = setting("100mbit", "Fabric: rate of every host link.")
    oversubscription: float = setting(2.0, "Fabric: leaf uplink oversubscription.")
    contention_step: int = setting(3, "Fabric: step from which greedy flows cross the spine.")
    paced_run: bool = setting(True, "Train a second time with pacing under its A/B guard.")
    sim_nodes: str = setting("8,16,32,64,128,256", "Node counts of the simulated study.")
    sim_steps: int = setting(200, "Simulated iterations per scale.")
    timeout_s: float = setting(150.0, "Bound on each training run.")

    def __post_init__(self) -> None:
        check_numbers(
            self,
            epochs="[1, 10000]",
            max_steps="[0, 10000000]",
            slow_rank="[0, 3]",
            slow_ms="[0, 100000]",
            oversubscription="(0, 1000]",
            contention_step="[0, 10000000]",
            sim_steps="[2, 10000000]",
            timeout_s="(0, 86400]",
        )
        if 0 < self.max_steps < 12:
            raise SyncpaceError(f"max_steps must be 0 or >= 12, got {self.max_steps}")
        try:
            nodes = [int(n) for n in self.sim_nodes.split(",") if n.strip()]
        except ValueError as exc:
            raise SyncpaceError(
                f"sim_nodes: integers like 8,64,256, got {self.sim_nodes!r}"
            ) from exc
        if not nodes or min(nodes) < 2 or max(nodes) > TopologySpec.MAX_NODES:
            raise SyncpaceError(
                f"sim_nodes: node counts in 2..{TopologySpec.MAX_NODES}, got {self.sim_nodes!r}"
            )

    @property
    def nodes(self) -> list[int]:
        return sorted({int(n) for n in self.sim_nodes.split(",") if n.strip()})

    @property
    def steps(self) -> int:
        per_epoch = 11  # 1,437 training images, 4 ranks, 32 per rank and step
        total = per_epoch * self.epochs
        return min(total, self.max_steps) if self.max_steps else total


@dataclass(frozen=True)
class DemoResult:
    out: Path
    trace_dir: Path
    paced_dir: Path | None
    report: Path | None
    on_fabric: bool
    modes: tuple[str, ...]
    straggler_ranks: tuple[int, ...]
    straggler_nodes: tuple[str, ...]
    contention_found: bool
    pacing: dict[str, Any] | None
    iteration_ms: float = 0.0
    study: list[dict[str, Any]] = field(default_factory=list)  # empty when withheld
    notes: tuple[str, ...] = ()
    check: dict[str, Any] = field(default_factory=dict)  # the simulator's replay check

    def to_json(self) -> dict[str, Any]:
        out = {k.name: getattr(self, k.name) for k in dataclasses.fields(self)}
        return {k: str(v) if isinstance(v, Path) else v for k, v in out.items()}


def can_use_fabric() -> str | None:
    """None when the fabric can be built here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed"
    return None


def run_demo(config: DemoConfig, console: Console | None = None) -> DemoResult:

    console = console or make_console()
    out = Path(config.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    why_not = can_use_fabric() if config.fabric else "--no-fabric"
    console.print(
        f"[bold]syncpace demo[/]: handwritten digits, DDP on 4 gloo ranks, traced → {out}"
    )
    if why_not is None:
        fabric = DemoFabric(
            FabricSettings(host_rate=config.host_rate, oversubscription=config.oversubscription)
        )
        try:
            with console.status("bringing up the emulated fabric…"):
                fabric.__enter__()
        except FabricError as exc:
            why_not = f"the fabric could not be built: {exc}"
        else:
            try:
                console.print(f"fabric: {fabric.describe()}")
                return _phases(config, console, out, fabric)
            finally:
                fabric.__exit__(None, None, None)
    console.print(
        f"[yellow]localhost only ({why_not}): the straggler is planted; the contended uplink "
        "needs the emulated fabric, which needs root[/]"
    )
    return _phases(config, console, out, None)


def _phases(config: DemoConfig, console: Console, out: Path, fabric: Any) -> DemoResult:

    on_fabric = fabric is not None
    where = (
        f"host h{config.slow_rank}, rank {config.slow_rank}"
        if on_fabric
        else (f"rank {config.slow_rank}")
    )
    planted = f"straggler {where} (+{config.slow_ms:g} ms every step)"
    if on_fabric:
        planted += f"; greedy flows across the spine from step {config.contention_step}"
    console.print(f"planted: {planted}")
    notes: list[str] = []
    with _progress(console) as progress:
        trace_dir, outcome = _train(config, progress, out / "trace", fabric, paced=False)
    acc = f", held-out accuracy {outcome.accuracy:.1%}" if outcome.accuracy is not None else ""
    console.print(f"[green]✓[/] [1/5] trained {outcome.steps} steps{acc}; trace in {trace_dir}")
    if outcome.contention_error:
        notes.append(f"background flows failed: {outcome.contention_error}")
    with console.status("[2/5] diagnosing the trace…"):
        analysis = diagnose_runs([trace_dir])
    console.print("[green]✓[/] [2/5] diagnosis of the traced run:")
    _print_findings(console, analysis)
    if on_fabric:
        load = _uplink(trace_dir, outcome.contention_since_ns)
        if load:
            notes.append(load)
    paced_dir = pacing = None
    if config.paced_run:
        with _progress(console) as progress:
            paced_dir, _ = _train(config, progress, out / "trace-paced", fabric, paced=True)
        pacing = pacing_summary(load_trace(paced_dir))
        console.print(f"[green]✓[/] [3/5] pacing A/B: {escape(_pacing_text(pacing))}")
    else:
        console.print("[dim]  [3/5] pacing A/B skipped (--no-paced-run)[/]")
    with console.status("[4/5] simulating the same job at scale…"):
        measured = Measured(4, analysis.runs[0].iteration_ns / 1e6, trace_dir.name)
        study, calibration, check = _simulate(config, trace_dir, out, measured)
    console.print(f"[green]✓[/] [4/5] calibrated from the trace: {escape(calibration)}")
    # one line each however narrow the terminal: what scripts and tests look for
    console.print(f"  {escape(check.line())}", soft_wrap=True)
    if check.passed:
        console.print(f"  simulated at 4, {', '.join(map(str, config.nodes))} nodes:")
        _print_study(console, study)
    else:
        console.print(f"  [yellow]{escape(str(check.withheld()))}[/]", soft_wrap=True)
    with console.status("[5/5] writing the HTML report…"):
        report = _report([d for d in (trace_dir, paced_dir) if d is not None], out, notes)
    console.print("[green]✓[/] [5/5] report written")
    straggler = next((f for f in analysis.findings if f.mode == "straggler"), None)
    result = DemoResult(
        out=out,
        trace_dir=trace_dir,
        paced_dir=paced_dir,
        report=report,
        on_fabric=on_fabric,
        modes=tuple(f.mode for f in analysis.findings),
        straggler_ranks=tuple(straggler.ranks) if straggler else (),
        straggler_nodes=tuple(straggler.nodes) if straggler else (),
        contention_found=any(f.mode == "fabric_contention" for f in analysis.findings),
        pacing=pacing,
        iteration_ms=analysis.runs[0].iteration_ns / 1e6,
        study=study,
        notes=tuple(notes),
        check=check.to_json(),
    )
    _print_summary(console, config, result, analysis)
    return result


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def _train(config: DemoConfig, progress: Progress, run_dir: Path, fabric: Any, paced: bool):

    run_dir = prepare_run_dir(str(run_dir), overwrite=True)
    steps = config.steps
    extra: list[object] = []
    if paced:
        # Windows short enough for a verdict within the run: 3 on/off pairs at most.
        window = max(3, steps // 8)
        pacing = PacingConfig(
            strategy="early",
            on_skew=0.05,
            off_skew=0.02,
            hold=2,
            window=window,
            ab_window=window,
            ab_min_pairs=2,
            ab_max_pairs=3,
            ab_settle=1,
        )
        extra = [pacing]
    env = traced_env(run_dir, TraceConfig(dir=str(run_dir)), None, *extra)
    env["OMP_NUM_THREADS"] = "1"
    label = "[3/5] training, paced (A/B)" if paced else "[1/5] training, traced"
    task = progress.add_task(label, total=steps, info="starting 4 ranks…")

    def update(done: int, total: int) -> None:
        info = "" if done else "ranks up"
        if monitor.outcome.contention_from_step is not None:
            info = "flows across the spine"
        progress.update(task, completed=done, total=total or steps, info=info)

    spec = JobSpec(
        epochs=config.epochs,
        max_steps=config.max_steps,
        slow_rank=config.slow_rank,
        slow_ms=config.slow_ms,
        timeout_s=config.timeout_s,
    )
    if fabric is None:
        monitor = Monitor(update)
        outcome = run_local(spec, env, monitor)
    else:
        monitor = Monitor(update, at_step=config.contention_step)
        outcome = fabric.run(spec, run_dir, env, monitor)
    return run_dir, outcome


def _uplink(trace_dir: Path, since_ns: int | None) -> str | None:

    load = uplink_load(trace_dir, since_ns)
    if load is None:
        return None
    link, util = load
    return f"link counters: uplink {link} {util:.0%} busy while the flows ran"


def _print_findings(console: Console, analysis: Any) -> None:
    for i, f in enumerate(analysis.findings, 1):
        where = []
        if f.ranks:
            where.append("rank " + ",".join(map(str, f.ranks)))
        if f.nodes:
            where.append("host " + ",".join(f.nodes))
        style = {"critical": "bold red", "warning": "yellow"}.get(str(f.severity), "green")
        console.print(
            f"  {i}. [{style}]{f.severity}[/] [bold]{f.mode}[/]"
            f"{' (' + escape(' '.join(where)) + ')' if where else ''}, cost {f.cost:.0%}: "
            f"{escape(f.summary)}"
        )


def _pacing_text(p: dict[str, Any] | None) -> str:
    if p is None:
        return "the paced run recorded no pacing"

    return pacing_line(p)


def _simulate(
    config: DemoConfig, trace_dir: Path, out: Path, measured: Measured
) -> tuple[list[dict], str, ReplayCheck]:
    """The study calibrated from the trace, once the calibrated model has replayed the
    trace within the check's limits; no study (withheld, the page says why) otherwise."""

    scen = sc.load(SCENARIO)
    cfg = scen.config
    cal = calibrate(trace_dir)
    # The simulated nodes are linked at what the job measured between its ranks (on
    # localhost: loopback), and the named slow ranks are the spread between ranks:
    # modelled once, as slow ranks with their own factor.
    cal = dataclasses.replace(cal, across_nodes=True)
    if cal.slow_ranks:
        cal = dataclasses.replace(cal, rank_spread=0.0)
    cfg = cal.apply(cfg)  # with the slow ranks' measured factor
    cfg = cfg.replace(
        run=dataclasses.replace(
            cfg.run,
            steps=config.sim_steps,
            warmup=max(1, config.sim_steps // 20),
            record_events=False,
        )
    )
    check = replay_check(cfg, cal)
    study = None
    if not check.passed:
        withheld_page(out / "scaling.html", cfg.name, [check.line(), str(check.withheld())])
    else:
        # 4 nodes is the traced job itself: the study's first row checks the model against it
        study = run_study(cfg, [4, *config.nodes])
    parts = []
    if cal.compute_ms:
        parts.append(f"compute {cal.compute_ms:.1f} ms")
    if cal.bandwidth_gbps:
        # as applied: the fit to the communication after the last arrival may raise it
        net = f"bandwidth {cfg.topology.nic_gbps * 8e3:.0f} Mbit/s"
        parts.append(f"{net}, α {cfg.network.alpha_us:.0f} µs per step")
    if cal.slow_ranks:
        each = zip(cal.slow_ranks, cal.slow_factors, strict=False)
        parts.append("slow rank " + ", ".join(f"{r} x{f:.1f}" for r, f in each))
    calibration = ", ".join(parts) or "defaults"
    if study is None:
        return [], calibration, check
    scales = ", ".join(str(n) for n in sorted({4, *config.nodes}))
    simulated = [
        f"The demo's job (scenario {cfg.name}: {cfg.workload.batch_per_gpu} samples per rank "
        f"and step, {cfg.workload.model_mb:g} MB of gradients all-reduced) at {scales} nodes, "
        f"{config.sim_steps} iterations each, unpaced and paced.",
        f"Calibrated from the traced run {trace_dir.name}: {calibration}.",
        f"Checked first: {check.line()}",
        "4 nodes is the traced job itself: the check of the model against what was measured.",
    ]
    try:
        write_scaling_page(
            study.rows,
            out / "scaling.html",
            name=f"the demo job ({cfg.name})",
            simulated=simulated,
            measured=measured,
            report="report.html",
        )
    except SyncpaceError:
        pass  # plotly missing: the table is printed anyway
    return [dict(r) for r in study.rows], calibration, check


def _print_study(console: Console, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    table = Table(
        "nodes",
        "iteration ms",
        "samples/s",
        "efficiency",
        "CV",
        "pacing gain",
        box=None,
        padding=(0, 2),
    )
    paced = {r["nodes"]: r for r in rows if r["pacing"]}
    for r in (r for r in rows if not r["pacing"]):
        p = paced.get(r["nodes"])
        table.add_row(
            str(r["nodes"]),
            f"{r['iteration_ms']:.0f}",
            f"{r['throughput']:,.0f}",
            f"{r['efficiency']:.0%}",
            f"{r['cv']:.3f}",
            f"{p['pacing_gain']:+.1%}" if p is not None else "-",
        )
    console.print(table)


def report_runs(dirs: Sequence[Path], out: Path) -> tuple[Analysis, Path]:
    """The demo's report of its runs, ``out/report.html``, and the analysis it shows:
    the diagnosis ``syncpace report`` makes of the same directories with no flag given
    (the pacer's what-if row included), linked to the scaling page beside it when there
    is one. Raises PlotlyMissing without plotly."""
    analysis = diagnose_runs(dirs, DiagnoseSettings())
    return analysis, write_html(analysis, out / "report.html")


def rewrite_pages(out: Path, config: DemoConfig | None = None) -> tuple[Path, Path]:
    """The demo's two pages written again from the traces a demo left in ``out``
    (``trace``, and ``trace-paced`` when there): the scaling study, simulated again
    from the traced run, then the report. For pages of the current code without
    training again; raises PlotlyMissing without plotly."""
    config = config or DemoConfig()
    trace_dir = out / "trace"
    runs = [d for d in (trace_dir, out / "trace-paced") if d.is_dir()]
    analysis = diagnose_runs([trace_dir])
    measured = Measured(4, analysis.runs[0].iteration_ns / 1e6, trace_dir.name)
    _simulate(config, trace_dir, out, measured)
    return out / "scaling.html", report_runs(runs, out)[1]


def _report(dirs: Sequence[Path], out: Path, notes: list[str]) -> Path | None:
    try:
        return report_runs(dirs, out)[1]
    except PlotlyMissing:
        notes.append("report skipped: install the [report] extra for plotly")
        return None


def _print_summary(console: Console, config: DemoConfig, r: DemoResult, analysis: Any) -> None:
    console.rule("[bold]summary")
    if r.straggler_ranks:
        hit = config.slow_rank in r.straggler_ranks
        mark = "[green]✓[/]" if hit else "[red]✗[/]"
        nodes = f" on host {', '.join(r.straggler_nodes)}" if r.straggler_nodes else ""
        console.print(
            f"{mark} straggler found: rank {', '.join(map(str, r.straggler_ranks))}"
            f"{escape(nodes)} (planted: rank {config.slow_rank})"
        )
    else:
        console.print(f"[red]✗[/] the planted straggler (rank {config.slow_rank}) was not found")
    if r.on_fabric:
        mark = "[green]✓[/]" if r.contention_found else "[red]✗[/]"
        verb = "found" if r.contention_found else "not found"
        console.print(f"{mark} fabric contention {verb} (planted: flows across the spine)")
    else:
        console.print(
            "[dim]- contention not planted: the emulated fabric needs root (sudo syncpace demo)[/]"
        )
    for note in r.notes:
        console.print(f"  {escape(note)}")
    if r.pacing is not None:
        state = r.pacing.get("ab_state")
        advice = {
            "helps": "pacing kept: paced steps were measurably faster",
            "no_help": "pacing turned off by its A/B guard: no benefit shown with the "
            "confidence it needs (a persistent straggler is not fixed by holding the "
            "others back)",
            "not_needed": "pacing never switched on: arrival skew stayed below its threshold",
        }.get(state, f"pacing A/B verdict: {state} (the run was too short to decide)")
        console.print(f"- {advice}")
    base = [s for s in r.study if not s["pacing"]]
    if r.check:
        console.print(f"- {escape(ReplayCheck.from_json(r.check).line())}", soft_wrap=True)
        if r.check.get("reason"):
            reason = escape(r.check["reason"])
            console.print(f"- [yellow]predictions withheld: {reason}[/]", soft_wrap=True)
    if base:
        last = base[-1]
        paced = next((s for s in r.study if s["pacing"] and s["nodes"] == last["nodes"]), None)
        gain = f", pacing {paced['pacing_gain']:+.1%}" if paced else ""
        console.print(
            f"- simulated at {last['nodes']} nodes: efficiency {last['efficiency']:.0%}"
            f" of {base[0]['nodes']} nodes, CV {last['cv']:.3f}{gain}"
        )
    if r.report is not None:
        console.print(f"report: [bold]{r.report}[/]")
    if (r.out / "scaling.html").exists():
        console.print(f"scaling study: {r.out / 'scaling.html'}")
