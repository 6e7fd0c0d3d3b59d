"""A collective's plan as dependent TCP transfers between the ranks' ns-3 nodes.

The plan is the one both other tiers evaluate (:mod:`syncpace.sim.collectives`). Its
phases run in order: a phase's transfers start once every transfer of the phase
before has ended. A phase whose flows form rings (every rank sends to one and receives
from one) runs its ``steps`` as a ring does: each flow's bytes in ``steps`` equal
chunks, chunk ``k`` of a rank sent once it has received chunk ``k - 1`` from its
predecessor, each step ``alpha`` after what it waited for. Any other phase (trees,
all-to-all, a broadcast's chain, the halving rounds) sends each flow's bytes as one
transfer, ``steps`` x ``alpha`` after the phase began. Each (source, destination,
spine) pair keeps one TCP connection, as NCCL and gloo keep theirs.

A phase that stays inside the nodes and does the same on every node (the hierarchical
all-reduce's intra-node rings) is sent on one node only: every node's GPUs have their
own switch and links, the phase barrier keeps other traffic of the job out of it and
persistent flows leave from the NICs, so each node's copy of the phase is the same
simulation, ending at the same moment. Leaving out the copies removes most of the
segments of a multi-GPU job (a 25 MB bucket moves 88 % of its bytes over NVLink at 16
nodes of 8 GPUs) without changing any transfer's time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from syncpace.sim.collectives import Phase, Plan
from syncpace.sim.network import NetworkSpec, latency_s, phase_hashes
from syncpace.sim.packet.fabric import address, dotted
from syncpace.sim.topology import Topology


@dataclass
class Transfers:
    """Connections and transfers in the driver's lines; transfer ids in order."""

    #: (source, destination, spine, purpose) -> id: the job's ("job") and greedy flows'
    conns: dict[tuple[int, int, int, str], int] = field(default_factory=dict)
    xfers: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # lines of flows other than the job's

    def conn(self, src: int, dst: int, spine: int, purpose: str = "job") -> int:
        return self.conns.setdefault((src, dst, spine, purpose), len(self.conns))

    def add(self, conn: int, nbytes: float, delay_s: float, deps: list[int]) -> int:
        tail = " ".join(str(d) for d in deps)
        self.xfers.append(
            f"xfer {len(self.xfers)} {conn} {round(nbytes)} {delay_s:.9g} {len(deps)} {tail}"
        )
        return len(self.xfers) - 1

    def conn_lines(self) -> list[str]:
        return [
            f"conn {i} {s} {d} {dotted(int(address(s, sp)))} {dotted(int(address(d, sp)))}"
            for (s, d, sp, _), i in self.conns.items()
        ]


def spines_of(topo: Topology, src: np.ndarray, dst: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """The spine each flow crosses (0 where it crosses none): the topology's own route."""
    if topo.spec.kind == "switch":
        return np.zeros(np.size(src), dtype=np.int64)
    up = topo.route(src, dst, hashes)[:, 4]
    return np.where(up >= 0, (up - topo.base("leaf_up")) % topo.spec.spines, 0)


def is_ring(phase: Phase) -> bool:
    src, dst = phase.src, phase.dst
    return (
        phase.steps > 1
        and np.unique(src).size == src.size
        and np.array_equal(np.sort(src), np.sort(dst))
    )


def one_node(phase: Phase, gpus: int) -> Phase:
    """``phase`` on its first node only, when it stays inside the nodes and each node
    does the same (same flows between the same local GPUs, same bytes); else ``phase``."""
    if not phase.intra_only or phase.src.size == 0:
        return phase
    node = phase.src // gpus
    nodes = np.unique(node)
    if nodes.size == 1:
        return phase

    def local(n: int) -> np.ndarray:
        keep = node == n
        rows = np.stack([phase.src[keep] - n * gpus, phase.dst[keep] - n * gpus])
        order = np.lexsort(rows)
        return np.vstack([rows[:, order], phase.nbytes[keep][order]])

    first = local(int(node[0]))
    if any(not np.array_equal(local(int(n)), first) for n in nodes):
        return phase
    keep = node == node[0]
    return Phase(
        phase.src[keep], phase.dst[keep], phase.nbytes[keep], phase.coflow[keep], phase.steps, True
    )


def expand(
    plan: Plan,
    topo: Topology,
    spec: NetworkSpec,
    salt: int,
    out: Transfers,
    every_node: bool = False,
    after: list[int] | None = None,
) -> list[int]:
    """Append ``plan``'s transfers to ``out``, its first phase waiting on the transfers
    ``after``; node-symmetric intra-node phases on one node unless ``every_node`` (the
    tests compare the two). Returns the transfers of its last phase."""
    before: list[int] = list(after or [])
    for whole in plan.phases:
        phase = whole if every_node else one_node(whole, topo.spec.gpus_per_node)
        if before:  # the phase boundary: one zero-byte transfer every next one waits on
            before = [out.add(0, 0, 0.0, before)]
        hashes = phase_hashes(topo, phase, salt)[0]
        spine = spines_of(topo, phase.src, phase.dst, hashes)
        flows = zip(phase.src, phase.dst, spine, strict=True)
        conns = [out.conn(int(s), int(d), int(p)) for s, d, p in flows]
        alpha = latency_s(phase, topo, spec)
        if is_ring(phase):
            before = _ring(phase, conns, alpha / phase.steps, before, out)
        else:
            before = [
                out.add(c, float(b), alpha, before)
                for c, b in zip(conns, phase.nbytes, strict=True)
            ]
    return before


def _ring(
    phase: Phase, conns: list[int], alpha: float, before: list[int], out: Transfers
) -> list[int]:
    # incoming[i]: the flow that feeds flow i's sender (the flow whose receiver it is)
    receiver = {int(d): i for i, d in enumerate(phase.dst)}
    incoming = [receiver[int(s)] for s in phase.src]
    last = [-1] * len(conns)
    for k in range(phase.steps):
        now = []
        for i, c in enumerate(conns):
            deps = before if k == 0 else [last[incoming[i]]]
            now.append(out.add(c, float(phase.nbytes[i]) / phase.steps, alpha, deps))
        last = now
    return last
