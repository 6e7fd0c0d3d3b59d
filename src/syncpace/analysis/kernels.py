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


class Groups:
    """A dense group index ``idx`` (ids ``0..size-1``) and its reductions, each computed
    the fastest exact way the layout of the ids allows (a scatter, ``ufunc.at``, costs
    about 2 ns a row and is a fifth of a window's analysis at 4,096 ranks):

    - *runs*: ids that never decrease (a window's (rank, step) ids, its rows rank by
      rank) are reduced run by run (``reduceat``);
    - *tiled*: rows that are one sequence of distinct ids repeated (every rank making
      the same calls in the same order, a data-parallel window's instance ids) are
      reduced as a (repeats, calls) table over its first axis;
    - otherwise by the scatter. An id no row has gets ``empty``.

    Finding the layout costs one or two passes over the ids, repaid by the first
    reduction."""

    def __init__(self, idx: np.ndarray, size: int) -> None:
        self.idx, self.size = idx, size
        self.starts: np.ndarray | None = None  # runs: each run's first row
        self.row: np.ndarray | None = None  # tiled: the ids of one repeat, in order
        if len(idx) < 2:
            return
        if not (idx[1:] < idx[:-1]).any():
            change = np.empty(len(idx), dtype=bool)
            change[0] = True
            np.not_equal(idx[1:], idx[:-1], out=change[1:])
            self.starts = np.flatnonzero(change)
        else:
            self.row = _repeated_row(idx)

    def maximum(self, values: np.ndarray, empty: int = -1) -> np.ndarray:
        return self._reduce(np.maximum, values, empty)

    def minimum(self, values: np.ndarray, empty: int = _INT_MAX) -> np.ndarray:
        return self._reduce(np.minimum, values, empty)

    def first_row(self) -> np.ndarray:
        """Per id, its first row (``len(idx)`` where it has none)."""
        n = len(self.idx)
        if self.starts is not None:
            out = np.full(self.size, n, dtype=np.int64)
            out[self.idx[self.starts]] = self.starts
            return out
        if self.row is not None:
            out = np.full(self.size, n, dtype=np.int64)
            out[self.row] = np.arange(len(self.row), dtype=np.int64)
            return out
        return minimum(self.idx, np.arange(n, dtype=np.int64), self.size, empty=n)

    def _reduce(self, ufunc: np.ufunc, values: np.ndarray, empty: int) -> np.ndarray:
        # as the scatter into an array of ``empty`` does, ``empty`` is one of the values
        out = np.full(self.size, empty, dtype=np.int64)
        if self.starts is not None:
            out[self.idx[self.starts]] = ufunc(ufunc.reduceat(values, self.starts), empty)
        elif self.row is not None:
            reduced = ufunc.reduce(values.reshape(-1, len(self.row)), axis=0)
            out[self.row] = ufunc(reduced, empty)
        else:
            ufunc.at(out, self.idx, values)
        return out


def _repeated_row(idx: np.ndarray) -> np.ndarray | None:
    """The ids of one repeat when ``idx`` is one sequence of distinct ids repeated."""
    at = np.flatnonzero(idx == idx[0])
    width = int(at[1]) if len(at) > 1 else len(idx)
    if len(idx) % width or len(at) != len(idx) // width:
        return None
    row = idx[:width]
    if width > 1 and len(np.unique(row)) != width:
        return None
    if not (idx.reshape(-1, width) == row).all():
        return None
    return row


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
    # a column of one value adds nothing to the index (one group, one call kind): skipped
    varying = [i for i, span in enumerate(spans) if span > 1] or [0]
    parts = [parts[i] for i in varying]
    lows = [lows[i] for i in varying]
    spans = [spans[i] for i in varying]
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
