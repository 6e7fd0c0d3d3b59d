"""Standing queues of greedy background flows, for the analytical and flow tiers.

A fluid model shares a link's rate but has no queue. A greedy TCP flow (``background_flows``
without ``@F``) keeps the queue of the link direction it saturates standing: every
packet of the job that crosses that direction waits the queue's drain time
(occupancy / link rate) on that hop, and a ring pays it on every step, however short
its chunks. Both fast tiers add, per phase, ``steps`` x the largest sum of those waits
along any of the phase's flows (the lockstep model: the slowest hop sets every hop's
pace), beside the bandwidth share they already give the greedy flow.

Where the queue stands: each greedy flow's bottleneck, the first link on its path
(source NIC up to destination NIC down) where the greedy flows alone, max-min shared over
what fixed-rate flows leave, fill the link and the flow gets no less than any other
there. The job's own flows do not move it: the flow saturates it while the job computes
as while it communicates.

How full (``network.packet_tcp``, the hosts' congestion control, read here too):
- loss-based (``cubic``, ``newreno``) grows its window until the queue overflows, so it
  keeps the queue full up to what its socket buffer lets it have in flight (the packet
  tier's 6 MiB): on a 50 Mbit/s link the whole 343 kB queue, on a 10 Gbit/s one the
  buffer's 5.0 ms;
- ``bbr`` caps its in-flight data near twice its bandwidth-delay estimate and keeps
  about one round trip of its bottleneck's rate queued: ``network.bbr_queue_ms`` per
  flow (7 ms: the median backlog the emulated fabric's counters measured behind one
  greedy bbr flow at 50 Mbit/s, 45 kB).
Several flows with their queue on one direction add up, to at most the queue's size
(``network.packet_queue_ms`` of the rate plus the fabric's tbf bucket, the size the
packet tier gives every link). Fixed-rate flows keep no standing queue.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from syncpace.sim.collectives import Phase
from syncpace.sim.flows import max_min_rates
from syncpace.sim.network import HostTraffic, NetworkSpec
from syncpace.sim.packet.fabric import queue_bytes
from syncpace.sim.packet.net import BUFFER_BYTES
from syncpace.sim.topology import Topology

LOSS_BASED = ("cubic", "newreno")
_FULL = 1e-9  # relative headroom under which a link counts as saturated


@dataclass(frozen=True)
class StandingQueues:
    """The wait every job packet has on each link direction, and where it came from."""

    delay_s: np.ndarray  # (L,) seconds per hop: standing bytes / link rate
    occupancy: np.ndarray  # (L,) standing bytes

    def hops_s(self, routes: np.ndarray) -> np.ndarray:
        """(F,) the waits along each route (rows of link ids, -1 padded)."""
        return np.where(routes >= 0, self.delay_s[np.maximum(routes, 0)], 0.0).sum(axis=1)

    def phase_s(self, topo: Topology, phase: Phase, hashes: np.ndarray) -> float:
        """``steps`` x the worst flow's waits: the phase's lockstep steps each wait for
        its slowest hop. With ``ideal`` ECMP a flow crosses every spine path, and its
        packets on the worst one set the step."""
        if phase.intra_only or not phase.src.size:
            return 0.0
        if topo.spec.ecmp == "ideal":
            paths = topo.spec.spines * (topo.spec.cores if topo.spec.kind == "fat-tree" else 1)
            candidates = [np.full(phase.src.size, j, dtype=np.int64) for j in range(paths)]
        else:
            candidates = [hashes]
        worst = max(
            float(self.hops_s(topo.route(phase.src, phase.dst, h)).max()) for h in candidates
        )
        return phase.steps * worst


def per_flow_bytes(spec: NetworkSpec, rate: float) -> float:
    """What one greedy flow keeps standing at a bottleneck of ``rate`` bytes/s."""
    if spec.packet_tcp in LOSS_BASED:
        return float(BUFFER_BYTES)
    return spec.bbr_queue_ms * 1e-3 * rate


def bottlenecks(hosts: HostTraffic) -> list[int]:
    """Each greedy flow's bottleneck link: the first on its path that the greedy flows
    alone fill and where it gets no less than any other flow crossing it."""
    link = np.concatenate(hosts.greedy)
    entity = np.repeat(np.arange(len(hosts.greedy)), [g.size for g in hosts.greedy])
    weight = np.ones(link.size)
    rates = max_min_rates(link, entity, weight, hosts.capacity, len(hosts.greedy))
    load = np.bincount(link, weights=rates[entity], minlength=hosts.capacity.size)
    top = np.zeros(hosts.capacity.size)
    np.maximum.at(top, link, rates[entity])
    full = load >= hosts.capacity * (1 - _FULL)
    out = []
    for f, path in enumerate(hosts.greedy):
        held = full[path] & (rates[f] >= top[path] * (1 - _FULL))
        out.append(int(path[np.argmax(held)]))  # max-min leaves every flow one such link
    return out


def standing_queues(topo: Topology, spec: NetworkSpec, hosts: HostTraffic) -> StandingQueues | None:
    """The greedy flows' standing queues on ``topo``; None without greedy flows or with
    ``network.standing_queue`` off (the fluid share alone, as before)."""
    if not hosts.greedy or not spec.standing_queue:
        return None
    rate = topo.capacity
    occupancy = np.zeros(rate.size)
    for lk in bottlenecks(hosts):
        occupancy[lk] += per_flow_bytes(spec, rate[lk])
    limit = np.array([queue_bytes(8 * r, spec.packet_queue_ms) for r in rate], dtype=float)
    occupancy = np.minimum(occupancy, limit)
    return StandingQueues(occupancy / rate, occupancy)
