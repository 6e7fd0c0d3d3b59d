"""Scaling across runs of different world sizes: speedup and efficiency, strong and weak."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ScalingPoint:
    """One run's place on the scaling curve, relative to the smallest run.

    Strong scaling keeps the global batch: speedup = T(n0) / T(n), efficiency =
    speedup / (n / n0). Weak scaling keeps the per-rank batch: efficiency = T(n0) / T(n)
    and speedup = (n / n0) x efficiency (throughput grows with the ranks).
    """

    run: str
    world_size: int
    iteration_s: float
    cv: float
    strong_speedup: float
    strong_efficiency: float
    weak_speedup: float
    weak_efficiency: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def scaling_curve(runs: list[tuple[str, int, float, float]]) -> list[ScalingPoint]:
    """``runs`` as (name, world size, mean iteration seconds, iteration CV)."""
    usable = sorted((r for r in runs if r[2] > 0), key=lambda r: (r[1], r[0]))
    if not usable:
        return []
    _, n0, t0, _ = usable[0]
    points = []
    for name, n, t, cv in usable:
        ratio = n / n0
        strong = t0 / t
        points.append(ScalingPoint(name, n, t, cv, strong, strong / ratio, ratio * strong, strong))
    return points
