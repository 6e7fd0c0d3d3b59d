"""Exposed versus overlapped communication, per rank and iteration.

A collective transfers during [last enter of its instance, own exit]: before the last
rank arrives nothing moves, and that wait is counted as wait, not as communication.
The network share of an iteration is the union of those transfer intervals over the
iteration time. A rank can overlap communication with compute until it issues its
last collective of the iteration (in DDP/FSDP the last bucket marks the end of
backward); transfer still in flight after that point is *exposed*: the iteration
waits for it. Calls issued synchronously one after another therefore count as
overlapped except the last one (see docs/analysis.md).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from syncpace.analysis import kernels
from syncpace.analysis.collectives import Matched

_LIMIT = 1 << 62


def rank_step_comm(m: Matched) -> pl.DataFrame:
    """Per (rank, step): ``comm_ns`` (union of transfer intervals) and ``exposed_ns``."""
    t = m.events
    ok = t.exit >= 0
    if ok.all():  # boolean indexing copies: skip it in the usual case
        rs, t0, t1 = t.rs, t.last_enter, np.maximum(t.exit, t.last_enter)
    else:
        rs, t0 = t.rs[ok], t.last_enter[ok]
        t1 = np.maximum(t.exit[ok], t0)
    if len(rs) == 0:
        return pl.DataFrame(
            schema={"rank": pl.Int32, "step": pl.Int64, "comm_ns": pl.Int64, "exposed_ns": pl.Int64}
        )
    boundary = np.empty(len(rs), dtype=bool)
    boundary[0] = True
    np.not_equal(rs[1:], rs[:-1], out=boundary[1:])
    if not _sorted(rs, t0, boundary):
        order = np.lexsort((t0, rs))
        rs, t0, t1 = rs[order], t0[order], t1[order]
        np.not_equal(rs[1:], rs[:-1], out=boundary[1:])
    first = np.flatnonzero(boundary)
    group_rs = rs[first]
    comm, exposed = union_and_tail(first, t0, t1, t.tail_start[group_rs])
    rows = (m.by_rank_step or kernels.Groups(t.rs, t.rs_size)).first_row()[group_rs]
    return pl.DataFrame(
        {
            "rank": t.rank[rows].astype(np.int32),
            "step": t.step[rows],
            "comm_ns": comm,
            "exposed_ns": exposed,
        }
    )


def _sorted(rs: np.ndarray, t0: np.ndarray, boundary: np.ndarray) -> bool:
    """Whether rows are ordered by (rs, t0) already (usual: files are in issue order)."""
    starts = rs[boundary]
    if len(starts) > 1 and not np.all(starts[1:] > starts[:-1]):
        return False
    return bool(np.all((t0[1:] >= t0[:-1]) | boundary[1:]))


def union_and_tail(
    first: np.ndarray, t0: np.ndarray, t1: np.ndarray, tail: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per group of intervals (rows sorted by group, then start; groups begin at ``first``):
    the length of their union, and of the part of it after ``tail`` (one per group).

    Sweep: an interval adds what reaches beyond the running maximum end of the earlier
    intervals of its group. Each group's times are shifted into a window of its own
    (offset = group number x span - group start), so one running maximum over all rows
    never carries from one group into the next. Buffers are reused: on large traces each
    fresh array costs page faults.
    """
    lengths = np.diff(np.append(first, len(t0)))
    span = int((np.maximum.reduceat(t1, first) - t0[first]).max()) + 1
    if len(first) * span >= _LIMIT:  # pragma: no cover - absurd spans; exact slow path
        return _union_slow(first, t0, t1, tail)
    offset = np.arange(len(first), dtype=np.int64) * span - t0[first]
    shift = np.repeat(offset, lengths)
    reach = np.add(t1, shift)
    np.maximum.accumulate(reach, out=reach)
    lo = np.add(t0, shift)
    np.maximum(lo[1:], reach[:-1], out=lo[1:])  # at a group's first row lo wins anyway
    cut = np.repeat(tail + offset, lengths)
    np.maximum(cut, lo, out=cut)
    hi = np.add(t1, shift, out=shift)
    added = np.subtract(hi, lo, out=reach)
    np.clip(added, 0, None, out=added)
    late = np.subtract(hi, cut, out=cut)
    np.clip(late, 0, None, out=late)
    return np.add.reduceat(added, first), np.add.reduceat(late, first)


def _union_slow(
    first: np.ndarray, t0: np.ndarray, t1: np.ndarray, tail: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    comm, exposed = np.zeros(len(first), np.int64), np.zeros(len(first), np.int64)
    bounds = np.append(first, len(t0))
    for g in range(len(first)):  # one group at a time; only for absurd time spans
        a, b = t0[bounds[g] : bounds[g + 1]], t1[bounds[g] : bounds[g + 1]]
        prev = np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, b[:-1]])
        lo = np.maximum(a, prev)
        comm[g] = np.clip(b - lo, 0, None).sum()
        exposed[g] = np.clip(b - np.maximum(lo, tail[g]), 0, None).sum()
    return comm, exposed


def with_step_time(comm: pl.DataFrame, rank_steps: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step) of ``rank_steps``: ``step_ns``, ``comm_ns``, ``exposed_ns``."""
    return (
        rank_steps.select("rank", "step", "step_ns")
        .join(comm, on=["rank", "step"], how="left")
        .with_columns(pl.col("comm_ns", "exposed_ns").fill_null(0))
    )


def summary(overlap: pl.DataFrame) -> dict[str, float]:
    """Network share, exposed share and overlap ratio, averaged over ranks and steps."""
    valid = overlap.filter(pl.col("step_ns") > 0)
    if valid.height == 0:
        return {"network_share": 0.0, "exposed_share": 0.0, "overlap_ratio": 1.0}
    total = float(valid["step_ns"].sum())
    comm = float(valid["comm_ns"].sum())
    exposed = float(valid["exposed_ns"].sum())
    return {
        "network_share": comm / total,
        "exposed_share": exposed / total,
        "overlap_ratio": 1.0 - exposed / comm if comm > 0 else 1.0,
        "comm_ns_per_step": comm / valid.height,
        "exposed_ns_per_step": exposed / valid.height,
    }


def per_step(overlap: pl.DataFrame) -> pl.DataFrame:
    """Per step: mean over ranks of communication and exposed time."""
    return (
        overlap.group_by("step")
        .agg(comm_ns=pl.col("comm_ns").mean(), exposed_ns=pl.col("exposed_ns").mean())
        .sort("step")
    )
