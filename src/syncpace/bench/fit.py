"""The α–β model of an op from its size sweep: ``time = α + factor·size / β``.

Fitted on *relative* error (weighted least squares with weights 1/time²), so the
few-µs points of the latency regime count as much as the milliseconds of the bandwidth
regime; a few rounds of Huber reweighting keep a noisy point from dragging the fit.
``factor`` is the op's nccl-tests bus factor, so ``β`` is a bus bandwidth, comparable
across ops and with the link rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from syncpace.bench.results import AlphaBetaFit, SizeRow
from syncpace.trace.busbw import bus_factor

_HUBER_K = 1.345  # 95 % efficiency under Gaussian noise
_ROUNDS = 5


def _solve(x: np.ndarray, t: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Minimise Σ w·((α + γx − t)/t)² with α ≥ 0, γ ≥ 0; returns (α, γ)."""
    sw = np.sqrt(w) / t
    design = np.column_stack([sw, sw * x])
    (alpha, gamma), *_ = np.linalg.lstsq(design, np.sqrt(w), rcond=None)
    if alpha < 0:  # no visible latency: bandwidth only
        alpha = 0.0
        gamma = float(np.sum(w * x / t) / np.sum(w * (x / t) ** 2))
    if gamma * x.max() <= 1e-9 * t.max():  # no visible bandwidth term: latency only
        gamma = 0.0
        alpha = float(np.sum(w / t) / np.sum(w / t**2))
    return float(alpha), float(gamma)


def fit_alpha_beta(
    op: str, sizes: Sequence[float], times_us: Sequence[float], factor: float
) -> AlphaBetaFit | None:
    """Fit one op; ``None`` with fewer than two distinct sizes or non-positive times."""
    size = np.asarray(sizes, dtype=float)
    t = np.asarray(times_us, dtype=float)
    if len(np.unique(size)) < 2 or np.any(t <= 0) or not np.all(np.isfinite(t)):
        return None
    factor = factor if factor > 0 else 1.0  # one rank moves nothing; fall back to algbw
    x = factor * size
    w = np.ones_like(t)
    alpha, gamma = _solve(x, t, w)
    for _ in range(_ROUNDS):
        rel = (alpha + gamma * x - t) / t
        scale = 1.4826 * float(np.median(np.abs(rel - np.median(rel))))
        if scale <= 0:
            break
        w = np.minimum(1.0, _HUBER_K * scale / np.maximum(np.abs(rel), 1e-300))
        alpha, gamma = _solve(x, t, w)
    rel = np.abs(alpha + gamma * x - t) / t
    beta_b_per_us = math.inf if gamma == 0 else 1.0 / gamma
    return AlphaBetaFit(
        op=op,
        alpha_us=alpha,
        beta_gbps=beta_b_per_us / 1e3,  # bytes/µs → GB/s
        knee_bytes=alpha * beta_b_per_us / factor,
        bus_factor=factor,
        points=len(t),
        max_rel_error=float(rel.max()),
    )


def fit_rows(rows: Sequence[SizeRow], world_size: int) -> tuple[AlphaBetaFit, ...]:
    """One fit per op of a sweep, in the order the ops ran."""
    fits = []
    for op in dict.fromkeys(r.op for r in rows):
        mine = [r for r in rows if r.op == op]
        fit = fit_alpha_beta(
            op,
            [r.size_bytes for r in mine],
            [r.time_us for r in mine],
            bus_factor(op, world_size) or 1.0,
        )
        if fit is not None:
            fits.append(fit)
    return tuple(fits)
