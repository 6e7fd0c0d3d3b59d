"""Spec → concrete fabric: names, namespaces, addresses and links, deterministically.

Every switch is a bridge inside one switch namespace ``<name>-sw``; every host is a
namespace ``<name>-h<i>`` whose only interface ``eth0`` is a veth into its leaf.
Nothing is created in the caller's namespace, so interface names inside the
fabric are short and readable and two fabrics can never collide: only the
namespace names carry the fabric's unique name.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass
from typing import Any

from syncpace.fabric.spec import FabricSpec

HOST_IFNAME = "eth0"


@dataclass(frozen=True, slots=True)
class Host:
    name: str  # h0, h1, … numbered across leaves
    index: int  # node rank of the host
    leaf: str  # switch the host hangs off
    namespace: str
    address: str  # without prefix length
    ifname: str = HOST_IFNAME


@dataclass(frozen=True, slots=True)
class End:
    """One end of a link: a veth in a namespace; its egress shaper sends toward the peer."""

    node: str  # host or switch name
    namespace: str
    dev: str


@dataclass(frozen=True, slots=True)
class Link:
    name: str  # "<a>-<b>", e.g. h0-leaf0 or leaf0-spine
    a: End
    b: End
    rate_bps: int
    kind: str  # "host" or "uplink"

    def end(self, node: str) -> End:
        if node == self.a.node:
            return self.a
        if node == self.b.node:
            return self.b
        raise KeyError(node)


@dataclass(frozen=True, slots=True)
class Fabric:
    name: str
    topology: str
    prefixlen: int
    switch_namespace: str
    switches: tuple[str, ...]  # bridges, leaves first, spine last
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    queue_ms: float
    quickack: bool = False
    # the hosts' TCP congestion control: what the spec asked (empty: the kernel's) until
    # ``up`` reads it back from the hosts, then what they run
    congestion_control: str = ""

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Creation order; removal goes in reverse."""
        return (self.switch_namespace, *(h.namespace for h in self.hosts))

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def link(self, name: str) -> Link:
        for link in self.links:
            if link.name == name:
                return link
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fabric:
        links = tuple(
            Link(
                name=x["name"],
                a=End(**x["a"]),
                b=End(**x["b"]),
                rate_bps=int(x["rate_bps"]),
                kind=x["kind"],
            )
            for x in data["links"]
        )
        return cls(
            name=data["name"],
            topology=data["topology"],
            prefixlen=int(data["prefixlen"]),
            switch_namespace=data["switch_namespace"],
            switches=tuple(data["switches"]),
            hosts=tuple(Host(**h) for h in data["hosts"]),
            links=links,
            queue_ms=float(data["queue_ms"]),
            quickack=bool(data.get("quickack", False)),
            congestion_control=str(data.get("congestion_control", "")),
        )


def new_name() -> str:
    """A short random fabric name; the ``sp`` prefix marks syncpace's namespaces."""
    return "sp" + secrets.token_hex(2)


def build_fabric(spec: FabricSpec, name: str | None = None) -> Fabric:
    name = name or spec.name or new_name()
    network = spec.network
    switch_ns = f"{name}-sw"
    leaves = ["sw"] if spec.topology == "star" else [f"leaf{i}" for i in range(spec.n_leaves)]
    hosts: list[Host] = []
    links: list[Link] = []
    for leaf_index, leaf in enumerate(leaves):
        for j in range(spec.hosts):
            index = leaf_index * spec.hosts + j
            host = Host(
                name=f"h{index}",
                index=index,
                leaf=leaf,
                namespace=f"{name}-h{index}",
                address=str(network.network_address + 1 + index),
            )
            hosts.append(host)
            links.append(
                Link(
                    name=f"{host.name}-{leaf}",
                    a=End(host.name, host.namespace, HOST_IFNAME),
                    b=End(leaf, switch_ns, f"{leaf}-{host.name}"),
                    rate_bps=spec.host_rate_bps,
                    kind="host",
                )
            )
    switches = list(leaves)
    if spec.topology == "leaf-spine":
        switches.append("spine")
        for leaf in leaves:
            links.append(
                Link(
                    name=f"{leaf}-spine",
                    a=End(leaf, switch_ns, f"{leaf}-spine"),
                    b=End("spine", switch_ns, f"spine-{leaf}"),
                    rate_bps=spec.uplink_rate_bps,
                    kind="uplink",
                )
            )
    return Fabric(
        name=name,
        topology=spec.topology,
        prefixlen=network.prefixlen,
        switch_namespace=switch_ns,
        switches=tuple(switches),
        hosts=tuple(hosts),
        links=tuple(links),
        queue_ms=spec.queue_ms,
        quickack=spec.quickack,
        congestion_control=spec.congestion_control,
    )
