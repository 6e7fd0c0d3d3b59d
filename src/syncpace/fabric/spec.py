"""What fabric to build: the topology spec, from flags or a TOML file, validated.

A spec is small and declarative (topology, counts, rates, subnet); everything
concrete (names, addresses, links) is derived from it by :mod:`.topology`, so the
same spec always yields the same fabric.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncpace.config import check_numbers, load_toml, setting
from syncpace.errors import FabricError
from syncpace.fabric import tcp

TOPOLOGIES = ("star", "leaf-spine")

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:bit|bit/s|bps)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_NAME = re.compile(r"^[a-z][a-z0-9]{0,7}$")
#: Keys a spec file may hold that this kernel cannot honour, with the reason.
_UNSUPPORTED = {
    "delay": "latency emulation needs the netem qdisc, which this kernel lacks "
    "(see docs/fabric.md, 'Latency')",
    "latency": "latency emulation needs the netem qdisc, which this kernel lacks "
    "(see docs/fabric.md, 'Latency')",
    "spines": "one spine bridge only: several spines would form a bridged loop",
}


def parse_rate(text: str | int, what: str = "rate") -> int:
    """``"100mbit"``, ``"1.5Gbit"``, ``"500k"`` or an int → bits per second.

    Units are decimal *bits* (as ``tc`` means ``mbit``); byte units such as
    ``MB/s`` are refused because ``tc``'s ``mbps`` means megabytes.
    """
    if isinstance(text, bool):
        raise FabricError(f"{what}: expected a rate such as '100mbit', got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        match = _RATE.match(str(text))
        if not match:
            raise FabricError(
                f"{what}: cannot parse {text!r} as a rate; write e.g. '100mbit', '1gbit', "
                "'500kbit' (decimal bits per second)"
            )
        value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if not 8_000 <= value <= 100 * 10**9:
        raise FabricError(f"{what}: {text!r} is outside 8kbit..100gbit")
    return value


def format_rate(bps: float) -> str:
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= scale:
            value = bps / scale
            return f"{value:g}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{bps:g}bit"


@dataclass(frozen=True, kw_only=True, slots=True)
class FabricSpec:
    """A fabric to emulate: hosts are network namespaces, switches bridges, links veths."""

    topology: str = setting(
        "leaf-spine",
        "'star' (hosts on one switch) or 'leaf-spine' (leaves joined by one spine).",
    )
    leaves: int | None = setting(None, "Leaf switches (leaf-spine; default 2, star: 1).")
    hosts: int = setting(2, "Hosts per leaf switch (star: hosts on the switch).")
    host_rate: str = setting("100mbit", "Rate of every host link, each direction.")
    uplink_rate: str = setting(
        "",
        "Rate of every leaf-spine uplink, each direction "
        "(default: hosts x host_rate, i.e. not oversubscribed).",
    )
    oversubscription: float | None = setting(
        None, "Instead of uplink_rate: uplink = hosts x host_rate / this (2 means 1:2)."
    )
    subnet: str = setting("10.200.0.0/24", "IPv4 subnet of the hosts (h0 gets the first address).")
    queue_ms: float = setting(
        50.0, "Longest queueing delay a shaper buffers before dropping (tbf latency)."
    )
    quickack: bool = setting(
        False,
        "Hosts acknowledge TCP segments at once (route option quickack) instead of "
        "Linux's delayed ACKs, which can stall small transfers by 40 ms and more.",
    )
    congestion_control: str = setting(
        "",
        "TCP congestion control of every host (net.ipv4.tcp_congestion_control), one of "
        "/proc/sys/net/ipv4/tcp_available_congestion_control (default: the kernel's, "
        "read back from the hosts and recorded).",
    )
    name: str = setting("", "Fabric name, 1-8 of [a-z0-9] (default: random 'spXXXX').")

    def __post_init__(self) -> None:
        check_numbers(
            self,
            FabricError,
            leaves="[1, 64]",
            hosts="[1, 1024]",
            oversubscription="(0, 1000]",
            queue_ms="[1, 10000]",
        )
        if not isinstance(self.quickack, bool):  # a string "0" would read as true
            raise FabricError(f"quickack: expected true or false, got {self.quickack!r}")
        if self.topology not in TOPOLOGIES:
            raise FabricError(
                f"unknown topology {self.topology!r}; choose one of {', '.join(TOPOLOGIES)}"
            )
        if self.topology == "star" and self.leaves not in (None, 1):
            raise FabricError(f"a star has one switch; got leaves={self.leaves}")
        if self.n_hosts < 2:
            raise FabricError("a fabric needs at least 2 hosts")
        parse_rate(self.host_rate, "host_rate")
        if self.uplink_rate and self.oversubscription is not None:
            raise FabricError("give uplink_rate or oversubscription, not both")
        if self.uplink_rate:
            parse_rate(self.uplink_rate, "uplink_rate")
        if self.congestion_control:
            tcp.check(self.congestion_control)
        if self.name and not _NAME.match(self.name):
            raise FabricError(f"name {self.name!r}: use 1-8 characters of [a-z0-9], a letter first")
        network = self.network
        usable = network.num_addresses - 2
        if self.n_hosts > usable:
            raise FabricError(
                f"{self.n_hosts} hosts do not fit in subnet {self.subnet} ({usable} addresses); "
                "choose a larger subnet, e.g. --subnet 10.200.0.0/16"
            )

    @property
    def n_leaves(self) -> int:
        if self.topology == "star":
            return 1
        return 2 if self.leaves is None else self.leaves

    @property
    def n_hosts(self) -> int:
        return self.n_leaves * self.hosts

    @property
    def network(self) -> ipaddress.IPv4Network:
        try:
            network = ipaddress.ip_network(self.subnet, strict=True)
        except ValueError as exc:
            raise FabricError(f"subnet {self.subnet!r}: {exc}") from exc
        if not isinstance(network, ipaddress.IPv4Network):
            raise FabricError(f"subnet {self.subnet!r}: IPv4 only")
        return network

    @property
    def host_rate_bps(self) -> int:
        return parse_rate(self.host_rate, "host_rate")

    @property
    def uplink_rate_bps(self) -> int:
        if self.uplink_rate:
            return parse_rate(self.uplink_rate, "uplink_rate")
        return int(self.hosts * self.host_rate_bps / (self.oversubscription or 1.0))


def spec_fields() -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(FabricSpec)


def build_spec(file_values: dict[str, Any] | None = None, **flags: Any) -> FabricSpec:
    """Defaults < spec file < flags (flags that are ``None`` are not given)."""
    values = dict(file_values or {})
    values.update({k: v for k, v in flags.items() if v is not None})
    known = {f.name for f in spec_fields()}
    for key in values:
        if key in _UNSUPPORTED:
            raise FabricError(f"spec key {key!r} is not supported: {_UNSUPPORTED[key]}")
        if key not in known:
            raise FabricError(f"unknown spec key {key!r}; known: {', '.join(sorted(known))}")
    for key in ("host_rate", "uplink_rate"):
        if isinstance(values.get(key), int):
            values[key] = str(values[key])
    try:
        return FabricSpec(**values)
    except TypeError as exc:  # wrong value types from a file
        raise FabricError(f"invalid spec: {exc}") from exc


def load_spec_file(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read ``[fabric]`` and ``[[fault]]`` tables of a TOML spec file."""
    path = Path(path)
    data = load_toml(path, FabricError)
    unknown = set(data) - {"fabric", "fault"}
    if unknown:
        raise FabricError(f"{path}: unknown tables {sorted(unknown)}; expected [fabric], [[fault]]")
    fabric = data.get("fabric", {})
    faults = data.get("fault", [])
    if not isinstance(fabric, dict) or not isinstance(faults, list):
        raise FabricError(f"{path}: [fabric] must be a table and [[fault]] an array of tables")
    return fabric, faults
