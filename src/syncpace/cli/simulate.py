"""``syncpace simulate``: a simulated cluster that writes traces and runs scaling studies.

One node count runs one simulation (``--out DIR`` writes its trace, which ``diagnose``
and ``report`` read unchanged); a comma list (``--nodes 4,8,16,32,64``) runs a scaling
study and prints its table (``--json`` for machines, ``--plot FILE`` for a figure);
``--pacing-on device,host`` runs a paced arm with the delay on the device and one with
it on the host, so the table shows what a host-side delay would have done.
Calibrated from a trace (``--calibrate TRACE``), the model replays that trace first and
the check is printed; when it fails, the results are withheld with the reason (exit 1).
Parsing and printing only: the settings and their precedence are
:mod:`syncpace.sim.settings`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from syncpace.cli.output import add_force_flag, refuse_existing, refuse_existing_trace
from syncpace.config import add_flags, from_flags
from syncpace.console import make_console, visible
from syncpace.report import format as fmt
from syncpace.report import jsonout
from syncpace.report.scaling_page import write_scaling_page
from syncpace.sim.engine import SimConfig, SimResult, simulate
from syncpace.sim.settings import SimulateSettings, Simulation, finite, prepare
from syncpace.sim.study import StudyResult, arm_name, arms, render, run_study, withheld_page
from syncpace.sim.tracewrite import write_trace


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate a cluster: traces for diagnose/report, scaling studies with pacing",
        description="Simulate synchronous data-parallel training on a modelled cluster "
        "(topology, collectives, contention, noise, pacing). One node count writes a trace "
        "(--out); several run a scaling study.",
    )
    parser.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override any scenario setting, e.g. --set noise.jitter=0.05 (repeatable)",
    )
    add_flags(parser, SimulateSettings, title="the cluster, the job and the study")
    add_force_flag(parser, "the trace in --out and the --plot file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = from_flags(SimulateSettings, args)
    sim = prepare(settings, args.assignments)
    if settings.plot:
        refuse_existing(settings.plot, args.force, "--plot")
    if settings.out:  # checked before a long study, not after it
        refuse_existing_trace(settings.out, args.force)
    if sim.check is not None and not _checked(settings, sim):
        return 1
    if sim.is_study:
        return _study(settings, sim)
    return _single(settings, sim)


def _checked(settings: SimulateSettings, sim: Simulation) -> bool:
    """Print the replay check of a trace calibration (stderr with --json, whose stdout
    is the result); False, with the reason, when the predictions are withheld."""
    check = sim.check
    assert check is not None
    if not check.passed and settings.plot:
        withheld_page(settings.plot, sim.config.name, [check.line(), str(check.withheld())])
    if settings.json and not check.passed:
        payload = {"check": check.to_json(), "withheld": check.withheld()}
        print(jsonout.dumps(finite(payload), allow_nan=False))
        return False
    out = sys.stderr if settings.json else sys.stdout
    print(check.line(), file=out)
    if not check.passed:
        print(check.withheld(), file=out)
    return check.passed


def _say_tier(settings: SimulateSettings, result: SimResult, where: str = "") -> None:
    """The tier ``auto`` picked and why, one line (on stderr with --json)."""
    if result.tier_choice is not None:
        out = sys.stderr if settings.json else sys.stdout
        print(where + result.tier_choice.line(), file=out)


def _single(settings: SimulateSettings, sim: Simulation) -> int:
    cfg = sim.config
    result = simulate(cfg)
    _say_tier(settings, result)
    summary = finite(result.summary())
    out = write_trace(result, settings.out, settings.max_trace_ranks) if settings.out else None
    if settings.json:
        payload = {
            "summary": summary,
            "trace": str(out) if out else None,
            "config": result.config.to_json(),
            "calibration": sim.calibration.to_json() if sim.calibration else None,
            "check": sim.check.to_json() if sim.check else None,
        }
        print(jsonout.dumps(finite(payload), allow_nan=False))
        return 0
    print(
        f"simulated {summary['world_size']} ranks on {summary['nodes']} nodes, "
        f"{cfg.run.steps} iterations: {summary['iteration_ms']:.1f} ms/iteration, "
        f"varying by {summary['cv']:.1%} (CV), p99 {summary['p99_ms']:.1f} ms, "
        f"{summary['throughput']:,.0f} samples/s"
        + (
            f", pacing on {summary['pacing_on_share']:.0%} of steps "
            f"({fmt.ab_words({'ab_state': result.ab_state})})"
            if cfg.pacing.paced
            else ""
        )
    )
    if out:
        shown = visible(out)  # a name may hold terminal escapes
        print(f"trace: {shown}  (syncpace diagnose {shown})")
    return 0


def _study(settings: SimulateSettings, sim: Simulation) -> int:
    def keep(c: SimConfig, result: SimResult) -> None:
        _say_tier(settings, result, f"{c.topology.nodes} nodes: ")
        if settings.out:
            write_trace(result, Path(settings.out) / trace_name(c), settings.max_trace_ranks)

    runs = len(sim.nodes) * len(arms(sim.config, sim.placements))
    with _StudyProgress(runs, quiet=settings.json) as progress:
        study = run_study(
            sim.config, sim.nodes, placements=sim.placements, progress=progress, keep=keep
        )
    finite(study.to_json())
    if settings.plot:
        _page(settings, sim, study)
    if settings.json:
        payload = study.to_json()
        if sim.check is not None:
            payload["check"] = sim.check.to_json()
        print(jsonout.dumps(finite(payload), allow_nan=False))
        return 0

    console = make_console()
    console.print(render(study))
    if settings.plot:
        console.print(f"plot: {settings.plot}")
    return 0


def _page(settings: SimulateSettings, sim: Simulation, study: StudyResult) -> None:
    """The study as a page: what was simulated, the table, throughput and efficiency."""
    cfg = sim.config
    scales = ", ".join(str(n) for n in sorted(set(sim.nodes)))
    simulated = [
        f"Scenario {cfg.name} at {scales} nodes, {cfg.run.steps} iterations each "
        f"({cfg.workload.batch_per_gpu} samples per rank and step, {cfg.workload.model_mb:g} MB "
        "of gradients).",
        f"Topology: {cfg.topology.kind}; pacing: {cfg.pacing.strategy}.",
        (
            f"Calibrated from a traced run, checked first: {sim.check.line()}"
            if sim.check is not None
            else "No traced run given: every figure is a prediction."
        ),
    ]
    write_scaling_page(study.rows, settings.plot, name=cfg.name, simulated=simulated)


def trace_name(config: SimConfig) -> str:
    """A study run's trace directory: ``nodes-N``, ``nodes-N-paced`` (the delay on the
    device) or ``nodes-N-paced-host``."""
    name = f"nodes-{config.topology.nodes}"
    if config.pacing.paced:
        name += "-paced" if arm_name(config) == "device" else f"-paced-{arm_name(config)}"
    return name


class _StudyProgress:
    """A rich progress bar over the runs of a study (silent with --json)."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.quiet = total, quiet

    def __enter__(self):  # noqa: ANN204
        if self.quiet:
            return lambda label: None
        from rich.progress import Progress

        self._bar = Progress(transient=True)
        self._bar.__enter__()
        self._task = self._bar.add_task("simulating", total=self.total)
        self._started = False

        def step(label: str) -> None:
            if self._started:
                self._bar.advance(self._task)
            self._started = True
            self._bar.update(self._task, description=f"simulating {label}")

        return step

    def __exit__(self, *exc: object) -> None:
        if not self.quiet:
            self._bar.__exit__(*exc)
