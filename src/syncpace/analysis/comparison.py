"""Runs of one job side by side: each run's headline numbers and its change against a
baseline run of the same world size (the first such run given).

This is what several runs of *equal* world size are (A/B, paced and unpaced, before and
after a fix); runs of different world sizes are a scaling study (``scaling``), and
their numbers are listed side by side without a change against each other. Runs of
different jobs (``jobs``) are never each other's baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from syncpace.analysis.metrics import RunMetrics


@dataclass(frozen=True)
class RunComparison:
    """One run's headline numbers (times in seconds, shares as fractions).

    ``baseline`` is the run it is compared with, ``None`` for a baseline itself or when
    no other run has its world size; ``iteration_change`` is its mean iteration time
    relative to the baseline's (-0.05: 5 % faster), ``None`` without a baseline.
    """

    run: str
    world_size: int
    steps: int
    iteration_s: float
    iteration_p50_s: float
    iteration_p99_s: float
    cv: float
    steps_per_s: float
    network_share: float
    exposed_share: float
    wait_share: float
    paced_fraction: float | None
    baseline: str | None
    iteration_change: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def compare_runs(
    runs: Sequence[RunMetrics], jobs: Sequence[int] | None = None
) -> list[RunComparison]:
    """One row per run, in the order given; empty for a single run. ``jobs``: per run,
    which job it is (:func:`syncpace.analysis.jobs.one_job`); a run is compared only
    with a run of its own job (all one job when not given)."""
    if len(runs) < 2:
        return []
    jobs = jobs if jobs is not None else [0] * len(runs)
    baselines: dict[tuple[int, int], RunMetrics] = {}
    rows = []
    for run, job in zip(runs, jobs, strict=True):
        base = baselines.setdefault((job, run.world_size), run)
        it = run.iteration
        mean = run.iteration_ns
        paired = base is not run and base.iteration_ns > 0 and mean > 0
        rows.append(
            RunComparison(
                run=run.run,
                world_size=run.world_size,
                steps=int(it.get("count", 0)),
                iteration_s=mean / 1e9,
                iteration_p50_s=it.get("p50", 0.0) / 1e9,
                iteration_p99_s=it.get("p99", 0.0) / 1e9,
                cv=it.get("cv", 0.0),
                steps_per_s=1e9 / mean if mean > 0 else 0.0,
                network_share=run.comm.get("network_share", 0.0),
                exposed_share=run.comm.get("exposed_share", 0.0),
                wait_share=wait_share(run),
                paced_fraction=(run.pacing or {}).get("fraction_paced") if run.pacing else None,
                baseline=base.run if paired else None,
                iteration_change=mean / base.iteration_ns - 1 if paired else None,
            )
        )
    return rows


def wait_share(run: RunMetrics) -> float:
    """Mean wait at each rank's last collective of an iteration, over the iteration time."""
    waits = run.rank_step["wait_ns"] if run.rank_step.height else None
    if waits is None or run.iteration_ns <= 0:
        return 0.0
    valid = waits.filter(waits >= 0)
    return float(valid.mean() or 0.0) / run.iteration_ns if valid.len() else 0.0  # type: ignore[arg-type]
