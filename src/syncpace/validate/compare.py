"""Compared statistics of one run (real or simulated) and their errors.

An iteration is the time between consecutive global boundaries (the last rank's end of
step), as :meth:`syncpace.sim.engine.SimResult.iteration_s` defines it; the transfer
time of a collective is the analysis' ``service_ns``
(:func:`syncpace.analysis.collectives.with_queueing`: from when every rank had issued
it and a slot of its group's stream was free to its end), what the simulator's
``comm_s`` counts for its one stream. Measurement is kept apart from judgement:
:func:`compare` computes the errors, :class:`Thresholds` decides pass or fail.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from syncpace.errors import ConfigError


@dataclass(frozen=True)
class Stats:
    iterations: int
    iteration_ms: float
    cv: float
    p99_ms: float
    transfer_ms: float  # median per-collective transfer time

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def stats_of(iteration_s: np.ndarray, transfer_s: np.ndarray) -> Stats:
    """Mean, CV and p99 of the iteration times; median of the transfer times."""
    it = np.asarray(iteration_s, dtype=float)
    tr = np.asarray(transfer_s, dtype=float)
    if it.size < 2:
        raise ConfigError(f"need at least 2 iterations to compare, got {it.size}")
    mean = float(it.mean())
    return Stats(
        iterations=int(it.size),
        iteration_ms=mean * 1e3,
        cv=float(it.std() / mean) if mean > 0 else 0.0,
        p99_ms=float(np.percentile(it, 99)) * 1e3,
        transfer_ms=float(np.median(tr)) * 1e3 if tr.size else float("nan"),
    )


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    mean_rel: float = 0.05  # |sim − real| / real of the mean iteration time
    cv_abs: float = 0.03  # |sim − real| of the CV


@dataclass(frozen=True)
class Comparison:
    point: str
    real: Stats
    sim: Stats
    mean_err: float  # relative, signed (sim − real) / real
    cv_err: float  # absolute, signed
    p99_err: float  # relative, signed
    transfer_err: float  # relative, signed
    mean_ok: bool
    cv_ok: bool
    tier: str = "analytical"  # the simulator's tier

    @property
    def passed(self) -> bool:
        return self.mean_ok and self.cv_ok

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["real"], out["sim"] = self.real.to_json(), self.sim.to_json()
        out["passed"] = self.passed
        return out


def _rel(sim: float, real: float) -> float:
    return (sim - real) / real if real > 0 else float("nan")


def compare(
    point: str,
    real: Stats,
    sim: Stats,
    limits: Thresholds | None = None,
    tier: str = "analytical",
) -> Comparison:
    limits = limits or Thresholds()
    mean_err = _rel(sim.iteration_ms, real.iteration_ms)
    cv_err = sim.cv - real.cv
    return Comparison(
        point=point,
        real=real,
        sim=sim,
        mean_err=mean_err,
        cv_err=cv_err,
        p99_err=_rel(sim.p99_ms, real.p99_ms),
        transfer_err=_rel(sim.transfer_ms, real.transfer_ms),
        mean_ok=bool(abs(mean_err) <= limits.mean_rel),
        cv_ok=bool(abs(cv_err) <= limits.cv_abs),
        tier=tier,
    )
