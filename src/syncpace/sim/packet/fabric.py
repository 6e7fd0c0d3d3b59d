"""A simulated cluster as ns-3 nodes, links and routes: the packet tier's network.

The nodes are the ranks (GPUs), a node's NICs (a GPU alone on its NIC and near it *is*
its NIC), each node's intra-node switch, and the job's switches: the one switch, or the
leaves that hold the job's nodes and every spine. Links carry the rates of
:class:`~syncpace.sim.topology.Topology`'s links: a NIC to its switch at ``nic_gbps``, a
leaf to each spine at the uplink rate, a GPU to its node's switch at ``intra_gbps``
(``pcie``: each GPU gets the node's shared rate, an approximation: the shared link is
not modelled), a far GPU to its NIC at ``far_bw_factor`` of the NIC rate, a near one at
:data:`FAST` times the NIC rate (no limit in the other tiers). Other jobs' traffic is
taken as its mean: the uplinks lose ``background_load`` of their rate.

Routes are static and by destination, so that a flow takes the spine the topology's
ECMP hash gives it: every rank answers to one address per spine (``10.0.0.0 +
spine << 18 + rank``), a sender addresses the receiver's address of its flow's spine
from its own address of that spine (the ACKs return the same way), leaves send the
other leaves' ranks' addresses of spine ``s`` to spine ``s``.

Every link's queue each way holds what the emulated fabric's tbf shaper holds
(:func:`queue_bytes`: ``queue_ms`` of the rate plus the bucket). With the ``wire``
shaper it is a FIFO in front of a link that sends every packet at the rate, as a NIC
does; with ``tbf`` it is the fabric's own shaper, a token bucket of the rate and the
fabric's bucket (:func:`burst_bytes`) in front of a link :data:`VETH` times faster (a
veth pair copies a packet in microseconds), so that a rested link passes its bucket at
once. Linux's tbf counts each frame's Ethernet header, which ns-3's queue discipline
does not see, so the bucket's rate is the link's rate less that share of a full frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from syncpace.errors import ConfigError
from syncpace.sim.topology import GB, Topology

#: A GPU near its NIC reaches it without a limit in the other tiers; here at this
#: multiple of the NIC rate, so the NIC stays the bottleneck.
FAST = 4.0
#: Propagation delay of every link (cables and switch latency of a data centre).
LINK_DELAY_S = 1e-6
#: The emulated fabric's tbf: its smallest bucket, and the time of the rate it holds
#: (``syncpace.fabric.plan``; a test holds the two equal).
MIN_BURST_BYTES = 15_000
BURST_S = 0.005
MAX_QUEUE_BYTES = (1 << 32) - 1
#: With the tbf shaper, a link sends at this multiple of its shaped rate (a veth).
VETH = 100.0
ETHERNET_HEADER = 14  # bytes of a frame that Linux's tbf counts beside the IP packet
SPINE_SHIFT = 18  # rank bits of an address
BASE = 10 << 24


def burst_bytes(rate_bps: float) -> int:
    """The fabric's tbf bucket at ``rate_bps``: 5 ms of the rate, at least 15 kB."""
    return max(MIN_BURST_BYTES, int(rate_bps / 8 * BURST_S))


def queue_bytes(rate_bps: float, queue_ms: float) -> int:
    """What the fabric's ``tbf rate R burst B latency L`` holds: L of the rate plus B."""
    # ns-3 counts a queue's bytes in 32 bits
    return min(int(rate_bps / 8 * queue_ms * 1e-3) + burst_bytes(rate_bps), MAX_QUEUE_BYTES)


def address(rank: int | np.ndarray, spine: int | np.ndarray) -> np.ndarray:
    # + 1: no rank's address ends in .0
    return BASE + (np.asarray(spine, dtype=np.int64) << SPINE_SHIFT) + np.asarray(rank) + 1


def dotted(value: int) -> str:
    v = int(value)
    return f"{v >> 24 & 255}.{v >> 16 & 255}.{v >> 8 & 255}.{v & 255}"


@dataclass
class Fabric:
    """The ns-3 network of one topology: node count, link lines and route lines."""

    nodes: int = 0
    spines: int = 1
    shaper: str = "wire"
    mtu: int = 1500
    links: list[tuple[int, int, float, int]] = field(default_factory=list)  # a, b, bps, queue
    routes: list[tuple[int, int, int, int]] = field(default_factory=list)  # node, dst, bits, link
    addresses: list[tuple[int, int]] = field(default_factory=list)  # node, address

    def node(self) -> int:
        self.nodes += 1
        return self.nodes - 1

    def link(self, a: int, b: int, bytes_per_s: float, queue_ms: float) -> int:
        bps = bytes_per_s * 8
        self.links.append((a, b, bps, queue_bytes(bps, queue_ms)))
        return len(self.links) - 1

    def _link_line(self, a: int, b: int, bps: float, queue: int) -> str:
        if self.shaper == "wire":
            return f"link {a} {b} {bps:.0f} {LINK_DELAY_S:g} {queue}"
        shaped = bps * self.mtu / (self.mtu + ETHERNET_HEADER)
        return (
            f"link {a} {b} {VETH * bps:.0f} {LINK_DELAY_S:g} {queue} "
            f"{shaped:.0f} {burst_bytes(bps)}"
        )

    def lines(self) -> list[str]:
        out = [f"nodes {self.nodes}"]
        out += [self._link_line(*link) for link in self.links]
        spine_mask = dotted((0xFFFFFFFF << SPINE_SHIFT) & 0xFFFFFFFF)
        out += [f"addr {n} {dotted(a)} {spine_mask}" for n, a in self.addresses]
        for n, d, bits, lk in self.routes:
            if bits == 0:
                # a default route, as one route per spine's prefix: ns-3 picks a sender's
                # source address by the route's destination, and 0.0.0.0 would give it
                # the link's address instead of the rank's
                out += [
                    f"route {n} {dotted(BASE + (sp << SPINE_SHIFT))} {spine_mask} {lk}"
                    for sp in range(self.spines)
                ]
            else:
                mask = dotted((0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF)
                out.append(f"route {n} {dotted(d)} {mask} {lk}")
        return out


def build(
    topo: Topology,
    queue_ms: float,
    background_load: float,
    shaper: str = "wire",
    mtu: int = 1500,
) -> Fabric:
    """The ns-3 network of ``topo``'s job (ranks ``0 .. world-1`` are nodes ``0 ..``)."""
    s = topo.spec
    if s.kind == "fat-tree":
        raise ConfigError("--tier packet: fat-tree is not modelled yet; use switch or leaf-spine")
    world, g = s.world_size, s.gpus_per_node
    spines = 1 if s.kind == "switch" else s.spines
    if world >= (1 << SPINE_SHIFT) - 1 or spines > 63:
        raise ConfigError(
            f"--tier packet: at most {(1 << SPINE_SHIFT) - 2} ranks and 63 spines, "
            f"got {world} and {spines}"
        )
    fab = Fabric(nodes=world, spines=spines, shaper=shaper, mtu=mtu)
    nic = s.nic_gbps * GB
    for r in range(world):
        for sp in range(spines):
            fab.addresses.append((r, int(address(r, sp))))
    nic_node = _nics(topo, fab, queue_ms, spines)
    if g > 1:
        _intra(topo, fab, queue_ms)
    if s.kind == "switch":
        sw = fab.node()
        for i, n in enumerate(nic_node):
            lk = fab.link(n, sw, nic, queue_ms)
            fab.routes.append((n, 0, 0, lk))
            for r in _ranks_of_nic(topo, i):
                fab.routes.append((sw, int(address(r, 0)), 32, lk))
        return fab
    _leaf_spine(topo, fab, nic_node, queue_ms, background_load, spines)
    return fab


def _ranks_of_nic(topo: Topology, nic: int) -> list[int]:
    s = topo.spec
    node, k = divmod(nic, s.nics_per_node)
    g = s.gpus_per_node
    return [node * g + j for j in range(g) if j * s.nics_per_node // g == k]


def _nics(topo: Topology, fab: Fabric, queue_ms: float, spines: int) -> list[int]:
    """One ns-3 node per NIC: the GPU itself when it is alone on the NIC and near it,
    else a node of its own linked to each of its GPUs (their default route)."""
    s = topo.spec
    nic = s.nic_gbps * GB
    count = s.nodes * s.nics_per_node
    nodes: list[int] = []
    for i in range(count):
        ranks = _ranks_of_nic(topo, i)
        if len(ranks) == 1 and not topo.far[ranks[0] % s.gpus_per_node]:
            nodes.append(ranks[0])
            continue
        n = fab.node()
        nodes.append(n)
        for r in ranks:
            rate = s.far_bw_factor * nic if topo.far[r % s.gpus_per_node] else FAST * nic
            lk = fab.link(r, n, rate, queue_ms)
            fab.routes.append((r, 0, 0, lk))
            for sp in range(spines):
                fab.routes.append((n, int(address(r, sp)), 32, lk))
    return nodes


def _intra(topo: Topology, fab: Fabric, queue_ms: float) -> None:
    """Each node's GPUs on a switch of their own; a GPU reaches the others through it."""
    s = topo.spec
    rate = s.intra_gbps * GB
    for node in range(s.nodes):
        sw = fab.node()
        ranks = range(node * s.gpus_per_node, (node + 1) * s.gpus_per_node)
        ports = {r: fab.link(r, sw, rate, queue_ms) for r in ranks}
        for r in ranks:
            fab.routes.append((sw, int(address(r, 0)), 32, ports[r]))
            for q in ranks:
                if q != r:
                    fab.routes.append((r, int(address(q, 0)), 32, ports[r]))


def _leaf_spine(
    topo: Topology,
    fab: Fabric,
    nic_node: list[int],
    queue_ms: float,
    background_load: float,
    spines: int,
) -> None:
    s = topo.spec
    nic = s.nic_gbps * GB
    leaf_of_node = topo.leaf_of_site(topo.site)
    leaves = {int(leaf): fab.node() for leaf in np.unique(leaf_of_node)}
    spine_nodes = [fab.node() for _ in range(spines)]
    up_base = topo.base("leaf_up")
    to_spine: dict[tuple[int, int], int] = {}
    for leaf, ln in leaves.items():
        for sp, sn in enumerate(spine_nodes):
            rate = topo.capacity[up_base + leaf * spines + sp] * (1.0 - background_load)
            to_spine[leaf, sp] = fab.link(ln, sn, rate, queue_ms)
            # the other leaves' ranks, by the spine their address names
            fab.routes.append(
                (ln, BASE + (sp << SPINE_SHIFT), 32 - SPINE_SHIFT, to_spine[leaf, sp])
            )
    for i, n in enumerate(nic_node):
        leaf = int(leaf_of_node[i // s.nics_per_node])
        lk = fab.link(n, leaves[leaf], nic, queue_ms)
        fab.routes.append((n, 0, 0, lk))
        for r in _ranks_of_nic(topo, i):
            for sp, sn in enumerate(spine_nodes):
                fab.routes.append((leaves[leaf], int(address(r, sp)), 32, lk))
                fab.routes.append((sn, int(address(r, sp)), 32, to_spine[leaf, sp]))
