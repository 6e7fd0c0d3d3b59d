"""Analytical network tier: collective durations for all (iterations x buckets) at once.

Per phase of a plan, every link's capacity left by other jobs is split among the job's
coflows on it in proportion to their weight (bytes on the link over the coflow's largest
flow); a coflow runs at the smallest share along its links, and the phase lasts its α
terms plus the slowest coflow's largest flow over its rate. This is the bottleneck
share, not max-min: a coflow limited elsewhere does not hand its unused share back
(the flow tier does). Link loads come from the placement and ECMP paths; other jobs'
traffic is a two-state (on/off) Markov occupancy per switch uplink and iteration.

Persistent flows between the job's own nodes (``background_flows``) load NIC links as
well as uplinks: a fixed-rate one takes its rate off the capacity of every link on its
route (at least 5 % of a link stays); a greedy one counts as one more coflow of weight 1
on every link of its route, so it takes its bottleneck share like the job's coflows do,
and keeps the queue of the link it saturates standing: each phase also pays its steps
times the worst flow's waits in those queues (:mod:`syncpace.sim.standing`).
"""

from __future__ import annotations

import numpy as np

from syncpace.sim.collectives import Phase, Plan
from syncpace.sim.network import NetworkSpec, host_traffic, latency_s, phase_hashes
from syncpace.sim.standing import standing_queues
from syncpace.sim.topology import Topology

_CHUNK = 64  # iterations per vectorised block: bounds memory at thousands of ranks


def background(topo: Topology, spec: NetworkSpec, iterations: int, seed: int) -> np.ndarray:
    """(I, U) share of each switch uplink other jobs occupy in each iteration."""
    ups = topo.uplinks().size
    out = np.zeros((iterations, ups))
    if spec.background_load <= 0 or ups == 0:
        return out
    rng = np.random.default_rng(np.random.SeedSequence([seed, 101]))
    duty = spec.background_duty
    p_off = 1.0 / spec.background_steps  # on -> off
    p_on = p_off * duty / (1 - duty) if duty < 1 else 1.0  # keeps the stationary duty
    state = rng.random(ups) < duty
    for i in range(iterations):
        out[i] = np.where(state, spec.on_load, 0.0)
        flip = rng.random(ups) < np.where(state, p_off, min(p_on, 1.0))
        state ^= flip
    return out


class AnalyticalNetwork:
    def __init__(self, topo: Topology, spec: NetworkSpec, iterations: int, seed: int) -> None:
        self.topo, self.spec = topo, spec
        self.bg = background(topo, spec, iterations, seed)
        hosts = host_traffic(topo, spec)
        self.capacity = hosts.capacity  # the topology's own array when no flow is fixed-rate
        self.greedy = hosts.greedy_count()  # None without greedy flows: nothing to add
        self.queues = standing_queues(topo, spec, hosts)  # None: nothing to wait for
        self.uplink_index = np.full(topo.n_links, -1, dtype=np.int64)
        self.uplink_index[topo.uplinks()] = np.arange(topo.uplinks().size)

    def durations(self, plans: list[Plan]) -> np.ndarray:
        """(I, K) seconds of bucket ``k``'s collective in iteration ``i``."""
        iters, k = self.bg.shape[0], len(plans)
        out = np.zeros((iters, k))
        if not plans or not plans[0].phases:
            return out
        base = float(plans[0].nbytes)
        scale = np.array([p.nbytes / base for p in plans])
        for phase in plans[0].phases:
            out += latency_s(phase, self.topo, self.spec)
            out += self._seconds_per_unit(phase, k) * scale[None, :]
            if self.queues is not None:
                out += self._queue_s(phase, k)
        return out

    def _queue_s(self, phase: Phase, buckets: int) -> np.ndarray | float:
        """The phase's waits in greedy flows' standing queues: one figure on static
        routes, (I, K) when every collective hashes its own."""
        topo, queues = self.topo, self.queues
        assert queues is not None
        if topo.spec.ecmp != "per_collective":
            return queues.phase_s(topo, phase, phase_hashes(topo, phase, 0)[0])
        iters = self.bg.shape[0]
        salts = np.arange(iters * buckets)
        waits = [queues.phase_s(topo, phase, h) for h in phase_hashes(topo, phase, salts)]
        return np.array(waits).reshape(iters, buckets)

    def _seconds_per_unit(self, phase: Phase, buckets: int) -> np.ndarray:
        """(I, K): time of the phase's transfer for the first plan's bytes."""
        iters = self.bg.shape[0]
        topo = self.topo
        if topo.spec.ecmp != "per_collective":
            pairs = self._pairs(phase, phase_hashes(topo, phase, 0)[0])
            return np.repeat(self._transfer(pairs, np.arange(iters))[:, None], buckets, axis=1)
        out = np.zeros((iters, buckets))
        for i in range(iters):
            salts = i * buckets + np.arange(buckets)
            for b, h in enumerate(phase_hashes(topo, phase, salts)):
                out[i, b] = self._transfer(self._pairs(phase, h), np.array([i]))[0]
        return out

    def _pairs(self, phase: Phase, hashes: np.ndarray):
        """Unique (coflow, link) pairs sorted by coflow, each link's total weight, and the
        largest flow of each coflow."""
        topo = self.topo
        src, dst, nb, cf = phase.src, phase.dst, phase.nbytes, phase.coflow
        share = np.ones(src.size)
        if topo.spec.ecmp == "ideal":  # spread every flow evenly over all paths
            m = topo.spec.spines * (topo.spec.cores if topo.spec.kind == "fat-tree" else 1)
            src, dst, nb, cf = (np.tile(a, m) for a in (src, dst, nb, cf))
            hashes = np.repeat(np.arange(m), phase.src.size)
            share = np.full(src.size, 1.0 / m)
        biggest = np.zeros(phase.coflows)
        np.maximum.at(biggest, phase.coflow, phase.nbytes)
        routes = topo.route(src, dst, hashes)
        weight = np.repeat(nb / biggest[cf] * share, routes.shape[1])
        link = routes.reshape(-1)
        ent = np.repeat(cf, routes.shape[1])
        keep = link >= 0
        link, ent, weight = link[keep], ent[keep], weight[keep]
        total = np.bincount(link, weights=weight, minlength=topo.n_links)
        if self.greedy is not None:
            total += self.greedy
        key = np.unique(ent * topo.n_links + link)
        return key // topo.n_links, key % topo.n_links, total, biggest

    def _transfer(self, pairs, rows: np.ndarray) -> np.ndarray:
        ent, link, total, biggest = pairs
        if ent.size == 0:
            return np.zeros(rows.size)
        starts = np.flatnonzero(np.r_[True, ent[1:] != ent[:-1]])
        owners = ent[starts]
        cap = self.capacity[link] / total[link]
        up = self.uplink_index[link]
        out = np.empty(rows.size)
        for lo in range(0, rows.size, _CHUNK):
            r = rows[lo : lo + _CHUNK]
            if self.bg.shape[1]:
                free = np.where(up >= 0, 1.0 - self.bg[np.ix_(r, np.maximum(up, 0))], 1.0)
            else:
                free = np.ones((r.size, up.size))
            rate = np.minimum.reduceat(cap[None, :] * free, starts, axis=1)
            out[lo : lo + _CHUNK] = (biggest[owners][None, :] / rate).max(axis=1)
        return out
