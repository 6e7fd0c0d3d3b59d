"""The network tier a run with ``tier = "auto"`` uses, and the one line that says why.

The rule follows the measured cross-check of the fast tiers against the packet tier
(docs/validation.md, "Tiers checked against the packet tier"): where nothing competes
with the job, the analytical tier is as good as the others; where the job's own flows
share links (oversubscribed spines, other jobs' traffic) the flow tier's max-min
sharing is closer; where a persistent flow competes (``background_flows``), TCP's
response is what neither fast tier models, and the packet tier is picked when its
estimated ns-3 cost fits ``auto_budget_s``. Each finer tier is taken only when its
estimated cost fits the budget; otherwise the next coarser one, and the line says so.

The costs are estimates from rates measured on a shared 2-core machine (docs/simulator.md,
"Speed per tier"): segments ns-3 moves per CPU second, and flows the fluid network
solves per second.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from syncpace.sim.collectives import plan
from syncpace.sim.packet.net import HEADERS
from syncpace.sim.packet.transfers import one_node
from syncpace.sim.topology import GB, Topology

if TYPE_CHECKING:
    from syncpace.sim.engine import SimConfig

#: ns-3 TCP segments (with their hops and ACKs) per CPU second, measured (tier_check.py:
#: 8,500-17,700 on the cross-check's job without other flows, 8,200-14,400 on the
#: reference collective).
PACKET_SEGMENTS_PER_CPU_S = 9_000.0
#: A persistent flow costs more than its segments alone before each offset: it keeps
#: sending during the collective and its queue slows every packet behind it; measured
#: 1.0-3.0x on the cross-check's greedy points, the largest taken.
PERSISTENT_FLOW_COST = 3.0
#: the flow tier's entities (the job's coflows, other jobs' flows) per CPU second,
#: measured on the reference scenario at 4 nodes x 30 iterations (79,800 in 32.1 s).
FLOW_ENTITIES_PER_S = 2_500.0
MIB = 1 << 20


@dataclass(frozen=True)
class TierChoice:
    tier: str
    reason: str

    def line(self) -> str:
        return f"tier {self.tier}: {self.reason}"


def _plans(cfg: SimConfig, every_bucket: bool = False) -> list:
    """A plan per distinct bucket size, or per bucket of the step."""
    wl, topo = cfg.workload, cfg.topology
    ranks = np.arange(topo.world_size)
    sizes = wl.bucket_bytes() if every_bucket else np.unique(wl.bucket_bytes())
    return [plan(wl.op, cfg.network.algorithm, int(b), ranks, topo.gpus_per_node) for b in sizes]


def _distinct_runs(cfg: SimConfig) -> int:
    """Collectives the packet tier runs through ns-3 apart, per distinct plan."""
    if cfg.topology.ecmp == "per_collective":
        return cfg.run.steps * cfg.workload.bucket_bytes().size
    return 1


def estimate_packet_cpu_s(cfg: SimConfig) -> float:
    """ns-3 CPU seconds the packet tier would take for ``cfg``: the segments of a step's
    collectives (each collective apart under ``per_collective`` ECMP) and of its
    ``packet_warm`` warm-up steps (intra-node phases on one node, as the tier sends them)
    and of the persistent flows while they run alone before each offset and through the
    warm-ups' idle, times the samples."""
    net, topo = cfg.network, cfg.topology
    segment = net.packet_mtu - HEADERS
    g = topo.gpus_per_node
    apart = topo.ecmp == "per_collective"
    plans = _plans(cfg, every_bucket=not apart)
    job = sum(sum(float(one_node(ph, g).nbytes.sum()) for ph in p.phases) for p in plans) / segment
    job *= net.packet_warm + 1  # the warm-ups send the collective's bytes too
    flows = net.host_flows()
    samples = net.packet_samples if flows else 1
    nic = topo.nic_gbps * GB
    wl = cfg.workload
    idle_s = net.packet_warm * (wl.compute_s + wl.opt_ms * 1e-3)
    alone_s = net.packet_settle_s + net.packet_span_s / 2 + idle_s
    extra = sum(nic * (1.0 if f.share is None else f.share) * alone_s for f in flows) / segment
    extra *= PERSISTENT_FLOW_COST
    runs = samples * _distinct_runs(cfg)
    return runs * (job + extra * (len(plans) if apart else 1)) / PACKET_SEGMENTS_PER_CPU_S


def other_jobs_flows(cfg: SimConfig) -> float:
    """Other jobs' flows the flow tier would start over the run: its Poisson rate
    (:class:`~syncpace.sim.flownet.FlowNetwork`'s) times the run's compute time."""
    net, spec = cfg.network, cfg.topology
    if net.background_load <= 0 or spec.kind == "switch":
        return 0.0
    topo = Topology(spec, seed=cfg.run.seed)
    ups = topo.uplinks()
    if not ups.size or topo.cluster <= spec.nodes_per_leaf:
        return 0.0
    rate = net.background_load * topo.capacity[ups].sum() / 2 / (net.background_flow_mb * MIB)
    wl = cfg.workload
    return rate * cfg.run.steps * (wl.compute_s + wl.opt_ms * 1e-3)


def estimate_flow_s(cfg: SimConfig) -> float:
    """Seconds the flow tier would take: the job's coflows (each lockstep group of each
    phase of each collective) and other jobs' flows, each one entity of the fluid network."""
    per = [sum(ph.coflows for ph in p.phases) for p in _plans(cfg)]
    buckets = cfg.workload.bucket_bytes().size
    job = cfg.run.steps * buckets * float(np.mean(per) if per else 0)
    return (job + other_jobs_flows(cfg)) / FLOW_ENTITIES_PER_S


def _contention(cfg: SimConfig) -> str | None:
    """What makes the job's flows share links, in words (None: nothing)."""
    topo, net = cfg.topology, cfg.network
    if net.background_flows:
        return "background_flows share the job's links"
    if net.background_load > 0 and topo.kind != "switch":
        return f"other jobs load the uplinks ({net.background_load:g})"
    # scattered nodes land on several leaves however few they are
    spans = topo.kind != "switch" and (
        topo.nodes > topo.nodes_per_leaf or topo.placement == "scattered"
    )
    if spans and topo.oversub > 1:
        return f"the job crosses {topo.oversub:g}:1 oversubscribed uplinks"
    return None


def choose(cfg: SimConfig) -> TierChoice:
    """The tier for ``cfg``: its own unless it is ``auto``, then the rule above."""
    net = cfg.network
    if net.tier != "auto":
        return TierChoice(net.tier, "asked for")
    budget = net.auto_budget_s
    why = _contention(cfg)
    if why is None:
        return TierChoice(
            "analytical",
            "nothing shares the job's links: the fast tiers agree with ns-3 there",
        )
    if net.background_flows and topo_ok(cfg):
        cost = estimate_packet_cpu_s(cfg)
        if cost <= budget:
            return TierChoice(
                "packet",
                f"{why}, whose TCP the fast tiers do not model; ns-3 needs about "
                f"{cost:.0f} CPU s of the {budget:g} s budget",
            )
        why += f"; packet would need about {cost:.0f} CPU s, over the {budget:g} s budget"
    cost = estimate_flow_s(cfg)
    if cost <= budget:
        return TierChoice("flow", f"{why}; max-min sharing, about {_secs(cost)}")
    return TierChoice(
        "analytical", f"{why}; the flow tier would need about {_secs(cost)}, over {budget:g} s"
    )


def _secs(value: float) -> str:
    return "1 s or less" if value < 1 else f"{value:.0f} s"


def topo_ok(cfg: SimConfig) -> bool:
    """The packet tier models this topology (fat-tree it does not)."""
    return cfg.topology.kind != "fat-tree"


def resolve(cfg: SimConfig) -> tuple[SimConfig, TierChoice | None]:
    """``cfg`` with its tier settled, and the choice when ``auto`` made one."""
    if cfg.network.tier != "auto":
        return cfg, None
    choice = choose(cfg)
    return cfg.replace(network=dataclasses.replace(cfg.network, tier=choice.tier)), choice
