"""Fabric → the exact ``ip``/``tc`` commands that build, change and remove it. Pure.

Every command names its namespace with ``ip -n``/``tc -n``, or ``ip netns exec`` for
the one sysctl that pins a host's TCP congestion control (nothing runs in the caller's
namespace). A command that creates a namespace says so in ``creates``,
so the state file can record it *before* it runs: ``down`` then removes exactly
what exists of it, even after a crash half-way through ``up``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from syncpace.fabric import tcp
from syncpace.fabric.topology import End, Fabric, Link

#: Smallest tbf bucket: ten full-size frames, so a bucket never starves a frame.
MIN_BURST_BYTES = 15_000
#: The bucket holds this much time of the rate: short enough that a 2 s measurement
#: is within 1 % of the rate, long enough for the kernel's timer granularity.
BURST_S = 0.005


@dataclass(frozen=True, slots=True)
class Command:
    argv: tuple[str, ...]
    creates: str | None = None  # namespace this command creates

    def __str__(self) -> str:
        return " ".join(self.argv)

    def __add__(self, more: tuple[str, ...]) -> Command:
        return Command(self.argv + more, self.creates)


def _ip(namespace: str, *args: str) -> Command:
    return Command(("ip", "-n", namespace, *args))


def _tc(namespace: str, *args: str) -> Command:
    return Command(("tc", "-n", namespace, *args))


def burst_bytes(rate_bps: int) -> int:
    return max(MIN_BURST_BYTES, int(rate_bps / 8 * BURST_S))


def tbf_args(rate_bps: int, queue_ms: float) -> tuple[str, ...]:
    return (
        "tbf",
        "rate",
        f"{rate_bps}bit",
        "burst",
        str(burst_bytes(rate_bps)),
        "latency",
        f"{queue_ms:g}ms",
    )


def shape_commands(link: Link, rate_bps: int, queue_ms: float, verb: str) -> list[Command]:
    """One tbf per end: each end's egress shapes the direction toward its peer."""
    return [
        _tc(end.namespace, "qdisc", verb, "dev", end.dev, "root", *tbf_args(rate_bps, queue_ms))
        for end in (link.a, link.b)
    ]


def up_plan(fabric: Fabric) -> list[Command]:
    sw = fabric.switch_namespace
    plan = [Command(("ip", "netns", "add", sw), creates=sw), _ip(sw, "link", "set", "lo", "up")]
    for switch in fabric.switches:
        plan.append(_ip(sw, "link", "add", "name", switch, "type", "bridge"))
        # No IPv6 link-local addresses: the links carry only the job's traffic.
        plan.append(_ip(sw, "link", "set", "dev", switch, "addrgenmode", "none", "up"))
    hosts = {h.name: h for h in fabric.hosts}
    for link in fabric.links:
        if link.kind == "host":
            host = hosts[link.a.node]
            ns = host.namespace
            plan.append(Command(("ip", "netns", "add", ns), creates=ns))
            plan.append(_ip(ns, "link", "set", "lo", "up"))
            if fabric.congestion_control:
                # before any socket of the host: a connection keeps the one it opened with
                plan.append(Command(tcp.set_argv(ns, fabric.congestion_control)))
            plan.append(
                _ip(sw, "link", "add", "name", link.b.dev, "type", "veth")
                + ("peer", "name", link.a.dev, "netns", ns)
            )
            plan.append(_attach(link.b, link.b.node))
            plan.append(
                _ip(ns, "addr", "add", f"{host.address}/{fabric.prefixlen}", "dev", link.a.dev)
            )
            plan.append(_ip(ns, "link", "set", "dev", link.a.dev, "addrgenmode", "none", "up"))
            if fabric.quickack:
                plan.append(_quickack_route(ns, host.address, fabric.prefixlen, link.a.dev))
        else:
            plan.append(
                _ip(sw, "link", "add", "name", link.a.dev, "type", "veth")
                + ("peer", "name", link.b.dev)
            )
            plan.append(_attach(link.a, link.a.node))
            plan.append(_attach(link.b, link.b.node))
        plan.extend(shape_commands(link, link.rate_bps, fabric.queue_ms, "add"))
    return plan


def _quickack_route(namespace: str, address: str, prefixlen: int, dev: str) -> Command:
    """The host's subnet route, rewritten with ``quickack``: its TCP connections then
    acknowledge every segment at once (no delayed-ACK stalls)."""
    subnet = ipaddress.ip_interface(f"{address}/{prefixlen}").network
    return _ip(
        namespace,
        "route",
        "replace",
        str(subnet),
        "dev",
        dev,
        "proto",
        "kernel",
        "scope",
        "link",
        "src",
        address,
        "quickack",
        "1",
    )


def _attach(end: End, bridge: str) -> Command:
    return _ip(end.namespace, "link", "set", "dev", end.dev, "master", bridge) + (
        "addrgenmode",
        "none",
        "up",
    )


def down_plan(namespaces: list[str] | tuple[str, ...]) -> list[Command]:
    """Remove namespaces in reverse creation order; their veths, bridges and qdiscs go too."""
    return [Command(("ip", "netns", "del", ns)) for ns in reversed(namespaces)]


def set_rate_plan(fabric: Fabric, link: Link, rate_bps: int) -> list[Command]:
    return shape_commands(link, rate_bps, fabric.queue_ms, "change")


def link_state_plan(link: Link, up: bool) -> list[Command]:
    """Flap on the switch side (``b``): the host keeps its address and routes, as
    when a cable or switch port fails, and its sockets see the outage as loss."""
    return [_ip(link.b.namespace, "link", "set", "dev", link.b.dev, "up" if up else "down")]


def stats_command(namespace: str) -> Command:
    return _tc(namespace, "-s", "-j", "qdisc", "show")
