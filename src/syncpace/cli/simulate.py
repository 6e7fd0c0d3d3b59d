"""``syncpace simulate``: a simulated cluster that writes traces and runs scaling studies.

One node count runs one simulation (``--out DIR`` writes its trace, which ``diagnose``
and ``report`` read unchanged); a comma list (``--nodes 4,8,16,32,64``) runs a scaling
study and prints its table (``--json`` for machines, ``--plot FILE`` for a figure).
Settings: built-in defaults < scenario file < ``--set SECTION.KEY=VALUE`` < flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from syncpace.config import add_flags, from_flags, setting
from syncpace.console import make_console
from syncpace.control.policy import STRATEGIES, PacingConfig
from syncpace.errors import ConfigError
from syncpace.sim import scenario as sc
from syncpace.sim.calibrate import calibrate
from syncpace.sim.engine import simulate
from syncpace.sim.study import plot, render, run_study
from syncpace.sim.tracewrite import write_trace


@dataclass(kw_only=True, slots=True)
class SimulateSettings:
    scenario: str | None = setting(None, "Scenario file (TOML, or YAML with PyYAML).")
    nodes: str | None = setting(None, "Node count, or a comma list for a scaling study.")
    topology: str | None = setting(None, "switch, leafspine or fattree.")
    oversub: float | None = setting(None, "Leaf uplink oversubscription (1 = non-blocking).")
    gpus_per_node: int | None = setting(None, "GPUs (ranks) per node.")
    steps: int | None = setting(None, "Iterations per simulation.")
    seed: int | None = setting(None, "Seed of every random draw.")
    tier: str | None = setting(None, "Network tier: analytical or flow.")
    algorithm: str | None = setting(None, "All-reduce algorithm: ring, tree, rhd, hierarchical.")
    pace: str | None = setting(
        None, "Pacing strategy (off, early, target); a study runs both arms."
    )
    interference: str | None = setting(None, "Waiting ranks slow neighbours: none or spin.")
    calibrate: str | None = setting(None, "bench.json / bench run dir / trace dir to fit from.")
    out: str | None = setting(None, "Write the trace here (a study: one directory per run).")
    max_trace_ranks: int = setting(1024, "Write at most this many ranks (whole nodes) per trace.")
    plot: str | None = setting(None, "Study: write an HTML figure here.")
    json: bool = setting(False, "Print the result as JSON.")

    def __post_init__(self) -> None:
        if self.pace is not None and self.pace not in STRATEGIES:
            raise ConfigError(f"--pace must be one of {', '.join(STRATEGIES)}, got {self.pace!r}")
        if self.max_trace_ranks < 0:
            raise ConfigError("--max-trace-ranks must be >= 0 (0 = all)")

    def node_counts(self) -> list[int]:
        if self.nodes is None:
            return []
        try:
            counts = [int(x) for x in self.nodes.split(",") if x.strip()]
        except ValueError as exc:
            raise ConfigError(f"--nodes expects integers like 4,8,16, got {self.nodes!r}") from exc
        if not counts or min(counts) < 1:
            raise ConfigError(f"--nodes expects positive integers, got {self.nodes!r}")
        return counts


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
    add_flags(parser, SimulateSettings)
    parser.set_defaults(func=run)


def build_config(settings: SimulateSettings, assignments: list[str]):  # noqa: ANN201
    """The scenario with every override applied, and its study node counts."""

    scen = sc.load(settings.scenario) if settings.scenario else sc.from_dict({}, "defaults")
    cfg = scen.config
    cal_path = settings.calibrate or scen.calibration
    calibration = calibrate(cal_path) if cal_path else None
    if calibration is not None:
        cfg = calibration.apply(cfg)
    cfg = sc.override(cfg, assignments)
    topo = {
        k: v
        for k, v in (
            ("kind", settings.topology),
            ("oversub", settings.oversub),
            ("gpus_per_node", settings.gpus_per_node),
        )
        if v is not None
    }
    if settings.gpus_per_node is not None:
        topo["nics_per_node"] = min(cfg.topology.nics_per_node, settings.gpus_per_node)
        topo["far_gpus"] = tuple(g for g in cfg.topology.far_gpus if g < settings.gpus_per_node)
    counts = settings.node_counts() or list(scen.study_nodes)
    if len(counts) == 1:
        topo["nodes"] = counts[0]
    net = {k: v for k, v in (("tier", settings.tier), ("algorithm", settings.algorithm)) if v}
    run = {k: v for k, v in (("steps", settings.steps), ("seed", settings.seed)) if v is not None}
    if run.get("steps") is not None and cfg.run.warmup >= run["steps"]:
        run["warmup"] = run["steps"] // 10
    inter = {"mode": settings.interference} if settings.interference else {}
    try:
        cfg = cfg.replace(
            topology=dataclasses.replace(cfg.topology, **topo),
            network=dataclasses.replace(cfg.network, **net),
            run=dataclasses.replace(cfg.run, **run),
            interference=dataclasses.replace(cfg.interference, **inter),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc
    pacing = cfg.pacing
    if settings.pace is not None:
        base = pacing or PacingConfig()
        pacing = (
            None if settings.pace == "off" else dataclasses.replace(base, strategy=settings.pace)
        )
    elif not scen.study_pace and len(counts) > 1:
        pacing = None
    return cfg, counts, pacing, calibration


def run(args: argparse.Namespace) -> int:
    settings = from_flags(SimulateSettings, args)
    cfg, counts, pacing, calibration = build_config(settings, args.assignments)
    if len(counts) > 1:
        return _study(settings, cfg, counts, pacing)
    return _single(settings, cfg.replace(pacing=pacing), calibration)


def _single(settings: SimulateSettings, cfg, calibration) -> int:  # noqa: ANN001

    if not settings.out:
        cfg = cfg.replace(run=dataclasses.replace(cfg.run, record_events=False))
    result = simulate(cfg)
    out = write_trace(result, settings.out, settings.max_trace_ranks) if settings.out else None
    summary = result.summary()
    if settings.json:
        payload = {
            "summary": summary,
            "trace": str(out) if out else None,
            "config": cfg.to_json(),
            "calibration": calibration.to_json() if calibration else None,
        }
        print(json.dumps(payload, indent=2))
        return 0
    print(
        f"simulated {summary['world_size']} ranks on {summary['nodes']} nodes, "
        f"{cfg.run.steps} iterations: {summary['iteration_ms']:.1f} ms/iteration, "
        f"CV {summary['cv']:.3f}, p99 {summary['p99_ms']:.1f} ms, "
        f"{summary['throughput']:,.0f} samples/s"
        + (f", pacing on {summary['pacing_on_share']:.0%} of steps" if cfg.pacing else "")
    )
    if out:
        print(f"trace: {out}  (syncpace diagnose {out})")
    return 0


def _study(settings: SimulateSettings, cfg, counts: list[int], pacing) -> int:  # noqa: ANN001

    if not settings.out:
        cfg = cfg.replace(run=dataclasses.replace(cfg.run, record_events=False))

    def keep(c, result) -> None:  # noqa: ANN001
        if settings.out:
            name = f"nodes-{c.topology.nodes}{'-paced' if c.pacing else ''}"
            write_trace(result, Path(settings.out) / name, settings.max_trace_ranks)

    runs = len(counts) * (2 if pacing else 1)
    with _StudyProgress(runs, quiet=settings.json) as progress:
        study = run_study(cfg, counts, pacing, progress=progress, keep=keep)
    if settings.plot:
        plot(study, settings.plot)
    if settings.json:
        print(json.dumps(study.to_json(), indent=2))
        return 0

    console = make_console()
    console.print(render(study))
    if settings.plot:
        console.print(f"plot: {settings.plot}")
    return 0


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
