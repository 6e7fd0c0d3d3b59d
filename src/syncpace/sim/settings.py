"""The settings of ``syncpace simulate`` and the simulation they describe.

:class:`SimulateSettings` holds what a user gives on the command line (its flags are
derived from it); :func:`prepare` turns them into the configuration to simulate, in
the documented precedence: built-in defaults < scenario file < calibration <
``--set SECTION.KEY=VALUE`` < flags. One node count is one simulation; several are a
scaling study, paced too when the pacer has a strategy. Where the pacer's delay goes is
``workload.pacing_on``; ``--pacing-on device,host`` (or ``[study] pacing_on``) runs one
paced arm per place, a study even at one node count.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from syncpace.config import check_choice, check_numbers, renamed, setting
from syncpace.control.config import STRATEGIES
from syncpace.errors import ConfigError, SyncpaceError
from syncpace.sim import scenario as sc
from syncpace.sim.calibrate import Calibration, calibrate
from syncpace.sim.check import ReplayCheck, replay_check
from syncpace.sim.engine import SimConfig
from syncpace.sim.topology import TopologySpec
from syncpace.sim.workload import PLACEMENTS


@dataclass(kw_only=True, slots=True)
class SimulateSettings:
    scenario: str | None = setting(None, "Scenario file (TOML, or YAML with PyYAML).")
    nodes: str | None = setting(None, "Node count, or a comma list for a scaling study.")
    topology: str | None = setting(None, "switch, leaf-spine or fat-tree.")
    oversub: float | None = setting(None, "Leaf uplink oversubscription (1 = non-blocking).")
    gpus_per_node: int | None = setting(None, "GPUs (ranks) per node.")
    steps: int | None = setting(None, "Iterations per simulation.")
    seed: int | None = setting(None, "Seed of every random draw.")
    tier: str | None = setting(
        None,
        "Network tier: analytical, flow, packet (TCP on ns-3; the [packet] extra) or auto "
        "(picked per run, the reason printed).",
    )
    algorithm: str | None = setting(None, "All-reduce algorithm: ring, tree, rhd, hierarchical.")
    strategy: str | None = setting(
        None, "Pacing strategy (off, early, target); a study runs every scale with and without."
    )
    interference: str | None = setting(None, "Waiting ranks slow neighbours: none or spin.")
    pacing_on: str | None = setting(
        None, "Where the pacer's delay goes: device or host; device,host: a paced arm of each."
    )
    calibrate: str | None = setting(
        None,
        "bench.json / bench run dir / trace dir to fit from; a trace is replayed first and "
        "the results withheld (exit 1) unless within 5% in mean and 0.03 in CV.",
    )
    out: str | None = setting(None, "Write the trace here (a study: one directory per run).")
    max_trace_ranks: int = setting(1024, "Write at most this many ranks (whole nodes) per trace.")
    plot: str | None = setting(None, "Study: write an HTML figure here.")
    json: bool = setting(False, "Print the result as JSON.")

    def __post_init__(self) -> None:
        # the ranges of the simulation's own settings are checked once more where they land
        check_numbers(
            self,
            oversub="[1, 1000]",
            gpus_per_node="[1, 1024]",
            steps="[1, 10000000]",
            seed="[0, 1e18]",
            max_trace_ranks="[0, 100000000]",
        )
        if self.strategy is not None:
            check_choice(self, "strategy", STRATEGIES)
        self.node_counts()
        self.placements()

    def node_counts(self) -> list[int]:
        if self.nodes is None:
            return []
        try:
            counts = [int(x) for x in self.nodes.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(
                f"--nodes expects integers like 4,8,16, got {self.nodes[:40]!r}"
            ) from None
        limit = TopologySpec.MAX_NODES
        if not counts or not all(1 <= c <= limit for c in counts):
            raise ConfigError(f"--nodes expects integers in 1..{limit}, got {self.nodes[:40]!r}")
        return counts

    def placements(self) -> list[str]:
        """The places of the pacer's delay given by ``--pacing-on`` (a comma list)."""
        if self.pacing_on is None:
            return []
        places = list(dict.fromkeys(p.strip() for p in self.pacing_on.split(",") if p.strip()))
        if not places or not set(places) <= set(PLACEMENTS):
            raise ConfigError(
                f"--pacing-on expects {' or '.join(PLACEMENTS)} or a comma list of them, "
                f"got {self.pacing_on[:40]!r}"
            )
        return places


#: The simulation setting each flag lands in, to name the flag in an error.
FLAGS = {
    "kind": "--topology",
    "oversub": "--oversubscription",
    "gpus_per_node": "--gpus-per-node",
    "nodes": "--nodes",
    "steps": "--steps",
    "seed": "--seed",
    "tier": "--tier",
    "algorithm": "--algorithm",
    "mode": "--interference",
    "strategy": "--strategy",
    "pacing_on": "--pacing-on",
}


@dataclass(frozen=True)
class Simulation:
    """What :func:`prepare` made of the settings."""

    config: SimConfig
    nodes: tuple[int, ...]  # the scales of a study (none: a single run)
    calibration: Calibration | None
    placements: tuple[str, ...] = ()  # a study's paced arms (none: the workload's place)
    #: calibrated from a trace: the model replaying that trace (None: no trace)
    check: ReplayCheck | None = None

    @property
    def is_study(self) -> bool:
        return len(self.nodes) > 1 or len(self.placements) > 1


def prepare(settings: SimulateSettings, assignments: Sequence[str] = ()) -> Simulation:
    """The scenario with its calibration, the ``--set`` assignments and the flags applied."""
    scen = sc.load(settings.scenario) if settings.scenario else sc.from_dict({}, "defaults")
    cfg = scen.config
    cal_path = settings.calibrate or scen.calibration
    calibration = calibrate(cal_path) if cal_path else None
    if calibration is not None:
        cfg = calibration.apply(cfg)
    cfg = sc.override(cfg, list(assignments))
    counts = settings.node_counts() or list(scen.study_nodes)
    places = settings.placements() or list(scen.study_pacing_on)
    topo: dict[str, Any] = _given(
        kind=settings.topology, oversub=settings.oversub, gpus_per_node=settings.gpus_per_node
    )
    if settings.gpus_per_node is not None:
        topo["nics_per_node"] = min(cfg.topology.nics_per_node, settings.gpus_per_node)
        topo["far_gpus"] = tuple(g for g in cfg.topology.far_gpus if g < settings.gpus_per_node)
    if len(counts) == 1:
        topo["nodes"] = counts[0]
    run = _given(steps=settings.steps, seed=settings.seed)
    if "steps" in run and cfg.run.warmup >= run["steps"]:
        run["warmup"] = run["steps"] // 10
    sections = {
        "topology": topo,
        "network": _given(tier=settings.tier, algorithm=settings.algorithm),
        "run": run,
        "interference": _given(mode=settings.interference),
        "pacing": _given(strategy=settings.strategy),
        "workload": {"pacing_on": places[0]} if len(places) == 1 else {},
    }
    try:
        cfg = cfg.replace(
            **{name: dataclasses.replace(getattr(cfg, name), **v) for name, v in sections.items()}
        )
    except SyncpaceError as exc:  # a flag's value out of the simulation's own range
        raise renamed(exc, FLAGS) from None
    if not settings.out:
        cfg = cfg.replace(run=dataclasses.replace(cfg.run, record_events=False))
    if len(places) > 1 and not cfg.pacing.paced:
        raise ConfigError(
            "--pacing-on device,host compares paced arms: give a pacing strategy "
            "(--strategy early or target)"
        )
    # a model calibrated from a trace replays that trace before it predicts anything
    check = replay_check(cfg, calibration) if calibration and calibration.world_size else None
    if len(places) > 1:  # a comparison is a study, even at one scale
        counts = counts or [cfg.topology.nodes]
        return Simulation(cfg, tuple(counts), calibration, tuple(places), check)
    return Simulation(cfg, tuple(counts) if len(counts) > 1 else (), calibration, (), check)


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def finite(payload: Any, where: str = "result") -> Any:
    """``payload`` unchanged when every number in it is finite, else a ConfigError
    naming the first that is not (a simulation never prints NaN or invalid JSON)."""
    if isinstance(payload, float) and not math.isfinite(payload):
        raise ConfigError(f"the simulation gave a non-finite {where} ({payload}); check the inputs")
    if isinstance(payload, dict):
        for k, v in payload.items():
            finite(v, f"{where}.{k}" if where != "result" else str(k))
    elif isinstance(payload, (list, tuple)):
        for i, v in enumerate(payload):
            finite(v, f"{where}[{i}]")
    return payload
