"""Settings shared by both network tiers, and the pieces they have in common."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from syncpace.config import setting
from syncpace.errors import ConfigError
from syncpace.sim.collectives import ALGORITHMS, Phase
from syncpace.sim.topology import Topology

TIERS = ("analytical", "flow")


@dataclass(kw_only=True, slots=True)
class NetworkSpec:
    tier: str = setting("analytical", "analytical (vectorised, big sweeps) or flow (max-min fair).")
    algorithm: str = setting("hierarchical", "All-reduce algorithm: ring, tree, rhd, hierarchical.")
    alpha_us: float = setting(8.0, "Latency per step of a collective across nodes, us.")
    alpha_intra_us: float = setting(2.0, "Latency per step inside a node, us.")
    background_load: float = setting(0.0, "Mean share of switch uplinks used by other jobs.")
    background_duty: float = setting(0.5, "Share of time another job's traffic is on a link.")
    background_steps: float = setting(5.0, "analytical: mean on/off period, iterations.")
    background_flow_mb: float = setting(64.0, "flow: mean size of another job's flow, MiB.")
    exit_jitter_us: float = setting(2.0, "Spread of per-rank completion after a collective, us.")

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ConfigError(f"network tier must be one of {', '.join(TIERS)}, got {self.tier!r}")
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(
                f"algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}"
            )
        if self.alpha_us < 0 or self.alpha_intra_us < 0 or self.exit_jitter_us < 0:
            raise ConfigError("latencies must be >= 0")
        if not 0 <= self.background_load < 1:
            raise ConfigError(f"background_load must be in [0, 1), got {self.background_load}")
        if not 0 < self.background_duty <= 1 or self.background_steps < 1:
            raise ConfigError("background_duty must be in (0, 1] and background_steps >= 1")
        if self.background_flow_mb <= 0:
            raise ConfigError("background_flow_mb must be > 0")

    @property
    def on_load(self) -> float:
        """Share of a link other jobs take while their traffic is on."""
        return min(self.background_load / self.background_duty, 0.95)


def latency_s(phase: Phase, topo: Topology, spec: NetworkSpec) -> float:
    """α part of a phase: steps x (inter- or intra-node α), plus the far-GPU detour."""
    if phase.intra_only:
        return phase.steps * spec.alpha_intra_us * 1e-6
    far = topo.far[topo.local_of(phase.src)].any() or topo.far[topo.local_of(phase.dst)].any()
    extra = topo.spec.far_latency_us if far else 0.0
    return phase.steps * (spec.alpha_us + extra) * 1e-6


def phase_hashes(topo: Topology, phase: Phase, salt: np.ndarray | int) -> np.ndarray:
    """ECMP hash of every flow; ``salt`` varies per collective only for per_collective."""
    if topo.spec.ecmp != "per_collective":
        salt = 0
    salt = np.atleast_1d(np.asarray(salt, dtype=np.int64))
    return np.stack([topo.flow_hash(phase.src, phase.dst, int(s)) for s in salt])
