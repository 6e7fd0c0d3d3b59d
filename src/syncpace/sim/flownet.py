"""Flow-level network tier: each collective runs through the max-min fair fluid model.

The phases of a plan run in order; a phase first pays its α terms, then its coflows
start together and share the links max-min fairly with whatever else is in flight:
other jobs' flows, which arrive as a Poisson process between random cluster nodes on
different leaves, sized exponentially (mean ``background_flow_mb``), at a rate that
loads the switch uplinks to ``background_load`` on average. Rates are re-solved only
when something starts or ends.

Persistent flows between the job's own nodes (``background_flows``) load NIC links as
well as uplinks: a fixed-rate one takes its rate off the capacity of every link on its
route for the whole run (at least 5 % of a link stays); a greedy one is an entity of
infinite size (weight 1 on every link of its route) present from time 0, sharing max-min
with the job's coflows and other jobs' flows and never finishing, and keeps the queue of
the link it saturates standing: each phase also pays its steps times the worst flow's
waits in those queues (:mod:`syncpace.sim.standing`), before its coflows start.
"""

from __future__ import annotations

import numpy as np

from syncpace.sim.collectives import Plan
from syncpace.sim.flows import FluidNetwork, incidence
from syncpace.sim.network import NetworkSpec, host_traffic, latency_s, phase_hashes
from syncpace.sim.standing import standing_queues
from syncpace.sim.topology import Topology

_MIB = 1 << 20


class FlowNetwork:
    def __init__(self, topo: Topology, spec: NetworkSpec, seed: int) -> None:
        self.topo, self.spec = topo, spec
        hosts = host_traffic(topo, spec)
        self.fluid = FluidNetwork(hosts.capacity.copy())
        for links in hosts.greedy:  # infinite demand: never finishes, never awaited
            self.fluid.add(0.0, links, np.ones(links.size), np.inf, "host")
        self.queues = standing_queues(topo, spec, hosts)  # None: nothing to wait for
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 202]))
        self._bg_until = 0.0
        ups = topo.uplinks()
        self._rate = 0.0  # other jobs' flows per second
        if spec.background_load > 0 and ups.size and topo.cluster > topo.spec.nodes_per_leaf:
            # each flow crosses one leaf uplink and one leaf downlink (more in a fat-tree)
            offered = spec.background_load * topo.capacity[ups].sum() / 2
            self._rate = offered / (spec.background_flow_mb * _MIB)

    def run(self, plan: Plan, start_s: float, salt: int, index: int = -1) -> float:
        """Duration of ``plan`` started at ``start_s`` (seconds on the simulation clock);
        ``index``, its place in the step, is the packet tier's: the fluid network keeps
        its state by time."""
        t = start_s
        self._advance(t)
        for phase in plan.phases:
            t += latency_s(phase, self.topo, self.spec)
            hashes = phase_hashes(self.topo, phase, salt)[0]
            if self.queues is not None:
                t += self.queues.phase_s(self.topo, phase, hashes)
            routes = self.topo.route(phase.src, phase.dst, hashes)
            link, ent, weight, biggest = incidence(routes, phase.nbytes, phase.coflow)
            ids = set()
            for c in range(biggest.size):
                sel = ent == c
                ids.add(self.fluid.add(t, link[sel], weight[sel], float(biggest[c]), "job"))
            self._schedule_background(t + 1.0)
            while True:
                self.fluid.run_until(ids, until=self._bg_until)
                if not ids & set(self.fluid.entities) and not self._pending_ids(ids):
                    break
                self._schedule_background(self._bg_until + 1.0)
            t = self.fluid.now
        return t - start_s

    def _pending_ids(self, ids: set[int]) -> bool:
        return any(eid in ids for _, eid, _ in self.fluid._pending)

    def _advance(self, t: float) -> None:
        """Let other jobs' traffic run up to ``t`` (the job is idle meanwhile)."""
        self._schedule_background(t)
        if t > self.fluid.now:
            self.fluid.run_until(None, until=t)

    def _schedule_background(self, until: float) -> None:
        if self._rate <= 0 or until <= self._bg_until:
            self._bg_until = max(self._bg_until, until)
            return
        span = until - self._bg_until
        count = self.rng.poisson(self._rate * span)
        times = np.sort(self.rng.uniform(self._bg_until, until, count))
        cluster = self.topo.cluster
        src = self.rng.integers(0, cluster, count)
        dst = (src + self.rng.integers(1, cluster, count)) % cluster
        routes = self.topo.site_route(src, dst, self.rng.integers(0, 1 << 30, count))
        sizes = self.rng.exponential(self.spec.background_flow_mb * _MIB, count)
        for t, r, size in zip(times, routes, sizes, strict=True):
            links = r[r >= 0]
            if links.size:  # same-leaf pairs stay off the uplinks
                self.fluid.add(float(t), links, np.ones(links.size), float(size), "bg")
        self._bg_until = until
