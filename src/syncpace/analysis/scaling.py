"""Scaling across runs of different world sizes: speedup and efficiency, strong and weak.

A scaling curve needs at least two *different* world sizes. Runs of one world size are
runs of one job compared with each other (A/B, paced and unpaced, before and after a
fix): they are a comparison (``analysis.comparison``), never a point of a curve.
"""

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
    """``runs`` as (name, world size, mean iteration seconds, iteration CV).

    One point per world size: when several runs share a world size, the first of them
    (in the order given) stands for it. Fewer than two world sizes give no curve.
    """
    first: dict[int, tuple[str, int, float, float]] = {}
    for run in runs:
        if run[2] > 0:
            first.setdefault(run[1], run)
    if len(first) < 2:
        return []
    usable = [first[n] for n in sorted(first)]
    _, n0, t0, _ = usable[0]
    points = []
    for name, n, t, cv in usable:
        ratio = n / n0
        strong = t0 / t
        points.append(ScalingPoint(name, n, t, cv, strong, strong / ratio, ratio * strong, strong))
    return points
