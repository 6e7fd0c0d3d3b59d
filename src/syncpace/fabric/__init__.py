"""The emulated fabric: a real small star or leaf-spine network on one Linux host.

Hosts are network namespaces, switches are bridges, links are veth pairs shaped
with tbf. Real jobs run across it (one launcher per host namespace), faults and
background traffic are injected on a schedule, and link counters are sampled
into the run directory. Needs root; plans can be built and checked anywhere.
"""

from __future__ import annotations

from syncpace.errors import FabricError
from syncpace.fabric.spec import FabricSpec, build_spec, parse_rate
from syncpace.fabric.topology import Fabric, Host, Link, build_fabric

__all__ = [
    "Fabric",
    "FabricError",
    "FabricSpec",
    "Host",
    "Link",
    "build_fabric",
    "build_spec",
    "parse_rate",
]
