"""Small simulated clusters shared by the simulator tests."""

from __future__ import annotations

from typing import Any

from syncpace.sim.engine import SimConfig
from syncpace.sim.scenario import from_dict


def config(**sections: dict[str, Any]) -> SimConfig:
    """A 4-node x 4-GPU leaf-spine job (one node per leaf), 60 iterations, overridable."""
    base: dict[str, dict[str, Any]] = {
        "topology": {
            "kind": "leafspine",
            "nodes": 4,
            "gpus_per_node": 4,
            "nics_per_node": 4,
            "nodes_per_leaf": 1,
            "spines": 2,
        },
        "run": {"steps": 60, "seed": 3},
        "network": {"algorithm": "ring"},
    }
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    return from_dict(base).config
