"""Vectorised group reductions over a dense group index (numpy scatter, no Python loops).

Matching ~10M events into ~40k collective instances is the hot path of the analysis. A
hash group-by spends ~100 ns per row on one core; a scatter into a dense index (group
ids 0..size-1) spends ~2 ns, so the kernels below work on such an index.
"""

from __future__ import annotations

import numpy as np

_INT_MAX = np.iinfo(np.int64).max


def count(idx: np.ndarray, size: int) -> np.ndarray:
    return np.bincount(idx, minlength=size)


def total(idx: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    return np.bincount(idx, weights=values, minlength=size)


def maximum(idx: np.ndarray, values: np.ndarray, size: int, empty: int = -1) -> np.ndarray:
    out = np.full(size, empty, dtype=np.int64)
    np.maximum.at(out, idx, values)
    return out


def minimum(idx: np.ndarray, values: np.ndarray, size: int, empty: int = _INT_MAX) -> np.ndarray:
    out = np.full(size, empty, dtype=np.int64)
    np.minimum.at(out, idx, values)
    return out


def value_at_max(
    idx: np.ndarray, key: np.ndarray, values: np.ndarray, size: int, empty: int = -1
) -> np.ndarray:
    """Per group, ``values`` at the row where ``key`` is largest (ties: any such row)."""
    best = maximum(idx, key, size)
    hit = key == best[idx]
    out = np.full(size, empty, dtype=np.int64)
    out[idx[hit]] = values[hit]
    return out


def dense_index(parts: list[np.ndarray], limit: int) -> tuple[np.ndarray, int] | None:
    """Mixed-radix index of integer columns, each counted from its smallest value, or
    ``None`` when its range would exceed ``limit`` (then the caller factorises
    instead). From the smallest, not from 0: a window late in a long run holds steps
    and sequence numbers in the thousands, and (rank, step) counted from 0 outgrew the
    limit there: every window of a 2,441-step run was factorised, sorting its rows."""
    lows = [int(col.min()) if len(col) else 0 for col in parts]
    spans = [
        int(col.max()) - low + 1 if len(col) else 1 for col, low in zip(parts, lows, strict=True)
    ]
    if int(np.prod(spans, dtype=object)) > limit:
        return None
    idx = parts[0].astype(np.int64, copy=True)
    if lows[0]:
        idx -= lows[0]
    for col, low, span in zip(parts[1:], lows[1:], spans[1:], strict=True):
        idx *= span  # in place: every pass over 10M rows counts
        idx += col
        if low:
            idx -= low
    return idx, int(np.prod(spans, dtype=object))


def factorize(parts: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """Dense ids of the distinct rows of ``parts`` (sort-based; the slow path)."""
    stacked = np.stack(parts, axis=1)
    _, inverse = np.unique(stacked, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    return inverse.astype(np.int64), int(inverse.max()) + 1 if len(inverse) else 0


def group_index(parts: list[np.ndarray], slack: int = 4) -> tuple[np.ndarray, int]:
    """A dense group index over ``parts``: direct when compact, factorised otherwise."""
    n = len(parts[0])
    direct = dense_index(parts, limit=slack * n + 1_000_000)
    return direct if direct is not None else factorize(parts)


# Runs of rows ------------------------------------------------------------------------
# Over rows sorted by their first key, polars' window functions (``.over``) hash every
# row into its group: 0.5-1 µs a row with thousands of ranks on one core. The rows of a
# rank are one run there, so these work on runs instead.


def run_starts(*keys: np.ndarray) -> np.ndarray:
    """Per row: whether it starts a run of equal ``keys`` (rows in order)."""
    n = len(keys[0])
    start = np.zeros(n, dtype=bool)
    if n:
        start[0] = True
        for key in keys:
            start[1:] |= key[1:] != key[:-1]
    return start


def run_cumsum(values: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The running sum of ``values`` within each run (``start`` from :func:`run_starts`)."""
    total = np.cumsum(values)
    at = np.flatnonzero(start)
    before = np.r_[0, total[at[1:] - 1]] if len(at) else np.zeros(0, dtype=total.dtype)
    return total - np.repeat(before, np.diff(np.r_[at, len(values)]))


def run_position(start: np.ndarray) -> np.ndarray:
    """Per row: its place in its run (0 for the first)."""
    return run_cumsum(np.ones(len(start), dtype=np.int64), start) - 1


def run_cummax(values: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The running maximum of ``values`` within each run, as polars' ``cum_max``: a
    missing value (nan) stays missing and is passed over. One pass per place in the
    longest run, each over the rows at that place (short runs: a step's joins)."""
    values = np.asarray(values, dtype=np.float64)
    missing = np.isnan(values)
    carry = np.where(missing, -np.inf, values)
    position = run_position(start)
    order = np.argsort(position, kind="stable")
    bounds = np.searchsorted(position[order], np.arange(1, int(position.max(initial=0)) + 2))
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        rows = order[lo:hi]
        carry[rows] = np.maximum(carry[rows], carry[rows - 1])
    return np.where(missing, np.nan, carry)


def grouped_position(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: its place among the rows of its group of equal ``keys``, in row order,
    and the group's rows' order (a stable sort by the keys)."""
    order = np.lexsort(keys[::-1]) if len(keys[0]) else np.zeros(0, dtype=np.int64)
    start = run_starts(*(k[order] for k in keys))
    position = np.empty(len(order), dtype=np.int64)
    position[order] = run_position(start)
    return position, order
