"""Exposed versus overlapped communication, per rank and iteration.

A collective transfers during [last enter of its instance, own exit]: before the last
rank arrives nothing moves, and that wait is counted as wait, not as communication.
The network share of an iteration is the union of those transfer intervals over the
iteration time. A rank can overlap communication with compute until it issues its
last collective of the iteration (in DDP/FSDP the last bucket marks the end of
backward); transfer still in flight after that point is *exposed*: the iteration
waits for it. Calls issued synchronously one after another are therefore counted as
overlapped except the last one (see docs/analysis.md).
"""

from __future__ import annotations

import polars as pl

_RS = ("rank", "step")


def rank_step_overlap(ev: pl.DataFrame, rank_steps: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step): ``comm_ns`` (transfer union), ``exposed_ns``, ``step_ns``."""
    spans = ev.filter(pl.col("exit_ns") >= 0, pl.col("last_enter").is_not_null()).select(
        *_RS,
        "enter_ns",
        t0=pl.col("last_enter"),
        t1=pl.max_horizontal("exit_ns", "last_enter"),
    )
    tail = spans.group_by(_RS).agg(tail_start=pl.col("enter_ns").max())
    spans = spans.sort(*_RS, "t0")
    reach = pl.col("t1").cum_max().shift(1).over(_RS)
    spans = spans.with_columns(new=(reach.is_null() | (pl.col("t0") > reach)).cast(pl.Int32))
    spans = spans.with_columns(segment=pl.col("new").cum_sum())
    segments = spans.group_by(*_RS, "segment").agg(s0=pl.col("t0").min(), s1=pl.col("t1").max())
    segments = segments.join(tail, on=list(_RS), how="left")
    exposed = (pl.col("s1") - pl.max_horizontal("s0", "tail_start")).clip(lower_bound=0)
    per = segments.group_by(_RS).agg(
        comm_ns=(pl.col("s1") - pl.col("s0")).sum(), exposed_ns=exposed.sum()
    )
    return (
        rank_steps.select(*_RS, "step_ns")
        .join(per, on=list(_RS), how="left")
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
