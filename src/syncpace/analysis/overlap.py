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
        rs, t0 = t.rs, t.last_enter
        t1 = np.maximum(t.exit, t0)
    else:
        rs, t0 = t.rs[ok], t.last_enter[ok]
        t1 = np.maximum(t.exit[ok], t0)
    if len(rs) == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "comm_ns": pl.Int64,
                                    "exposed_ns": pl.Int64})  # fmt: skip
    boundary = np.empty(len(rs), dtype=bool)
    boundary[0] = True
    np.not_equal(rs[1:], rs[:-1], out=boundary[1:])
    if not _sorted(rs, t0, boundary):
        order = np.lexsort((t0, rs))
        rs, t0, t1 = rs[order], t0[order], t1[order]
        np.not_equal(rs[1:], rs[:-1], out=boundary[1:])
    s_rs, s0, s1 = _segments(rs, t0, t1, boundary)
    tail = t.tail_start[s_rs]
    exposed = np.clip(s1 - np.maximum(s0, tail), 0, None)
    comm = kernels.total(s_rs, (s1 - s0).astype(np.float64), t.rs_size)
    exp = kernels.total(s_rs, exposed.astype(np.float64), t.rs_size)
    size = t.rs_size
    rows = kernels.minimum(t.rs, np.arange(len(t.rs), dtype=np.int64), size)
    keep = rows < len(t.rs)
    return pl.DataFrame(
        {
            "rank": t.rank[rows[keep]].astype(np.int32),
            "step": t.step[rows[keep]],
            "comm_ns": comm[keep].astype(np.int64),
            "exposed_ns": exp[keep].astype(np.int64),
        }
    )


def _sorted(rs: np.ndarray, t0: np.ndarray, boundary: np.ndarray) -> bool:
    """Whether rows are ordered by (rs, t0) already (usual: files are in issue order)."""
    starts = rs[boundary]
    if len(starts) > 1 and not np.all(starts[1:] > starts[:-1]):
        return False
    return bool(np.all((t0[1:] >= t0[:-1]) | boundary[1:]))


def _segments(
    rs: np.ndarray, t0: np.ndarray, t1: np.ndarray, boundary: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Union of intervals sorted by (rs, t0): (rs, start, end) of each disjoint segment.

    A running maximum of the ends finds where a new segment starts; to keep it from
    running across groups, each group's times are shifted into their own window
    (offset = group number x span), which fits int64 for any realistic trace.
    """
    first = np.flatnonzero(boundary)
    lengths = np.diff(np.append(first, len(rs)))
    span = int((np.maximum.reduceat(t1, first) - t0[first]).max()) + 1
    if len(first) * span >= _LIMIT:  # pragma: no cover - absurd spans; exact slow path
        return _segments_slow(rs, t0, t1)
    # shift = group number x span - group base, so each group lives in its own window
    shift = np.repeat(np.arange(len(first), dtype=np.int64) * span - t0[first], lengths)
    reach = t1 + shift
    np.maximum.accumulate(reach, out=reach)
    new = boundary
    new[1:] |= (t0[1:] + shift[1:]) > reach[:-1]
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:] - 1, len(rs) - 1)
    return rs[starts], t0[starts], reach[ends] - shift[ends]


def _segments_slow(rs: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> tuple[np.ndarray, ...]:
    frame = pl.DataFrame({"rs": rs, "t0": t0, "t1": t1})
    reach = pl.col("t1").cum_max().shift(1).over("rs")
    frame = frame.with_columns(seg=(reach.is_null() | (pl.col("t0") > reach)).cum_sum())
    seg = frame.group_by("seg", maintain_order=True).agg(
        rs=pl.col("rs").first(), s0=pl.col("t0").min(), s1=pl.col("t1").max()
    )
    return seg["rs"].to_numpy(), seg["s0"].to_numpy(), seg["s1"].to_numpy()


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
