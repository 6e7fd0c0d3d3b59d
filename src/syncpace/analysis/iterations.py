"""Iteration metrics: time per rank and global, throughput, spread and percentiles.

Only work inside iterations counts here. Calls a rank makes after its last iteration
boundary (a checkpoint's all-gathers after the last ``optimizer.step()``, evaluation,
teardown barriers) belong to no iteration: :func:`split_trailing` keeps them apart,
and :func:`trailing_summary` says what they were.
"""

from __future__ import annotations

import polars as pl

from syncpace.analysis.collectives import call_key, call_steps


def after_warmup(
    steps: pl.DataFrame, events: pl.DataFrame, warmup_steps: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``steps`` and ``events`` without the first ``warmup_steps`` iterations (setup,
    first-call costs), unless nothing would be left; by call, not by event: a call
    some rank made in the warm-up is left out whole."""
    max_step = int(steps["step"].max()) if steps.height else 0  # type: ignore[arg-type]
    if not warmup_steps or max_step < warmup_steps:
        return steps, events
    steps = steps.filter(pl.col("step") >= warmup_steps)
    return steps, events.filter(call_steps(events) >= warmup_steps)


def rank_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step): the iteration time that rank saw, and when its first backward
    pass began (``backward_ns``, -1 where not seen or outside the step)."""
    valid = (pl.col("start_ns") >= 0) & (pl.col("end_ns") >= pl.col("start_ns"))
    backward = pl.col("backward_ns") if "backward_ns" in steps.columns else pl.lit(-1)
    inside = (backward >= pl.col("start_ns")) & (backward <= pl.col("end_ns"))
    return steps.filter(valid).select(
        "rank",
        "step",
        "start_ns",
        "end_ns",
        "pacing_delay_ns",
        step_ns=pl.col("end_ns") - pl.col("start_ns"),
        backward_ns=pl.when(inside).then(backward).otherwise(-1).cast(pl.Int64),
    )


def global_steps(rank_steps: pl.DataFrame) -> pl.DataFrame:
    """Per step: the job's iteration time, from one iteration boundary to the next.

    The boundary of step s is the latest ``end_ns`` over ranks (the job moves on when the
    slowest rank does); the first step, and a step whose predecessor was left out (an
    iteration of another kind, :mod:`syncpace.analysis.kinds`), run from the earliest
    start.
    """
    per = (
        rank_steps.group_by("step")
        .agg(
            end=pl.col("end_ns").max(),
            start=pl.col("start_ns").min(),
            ranks=pl.len(),
            rank_step_max=pl.col("step_ns").max(),
            rank_step_mean=pl.col("step_ns").mean(),
        )
        .sort("step")
    )
    prev = pl.col("end").shift(1)
    after_gap = pl.col("step").shift(1) != pl.col("step") - 1
    return per.with_columns(
        time_ns=pl.when(prev.is_null() | after_gap)
        .then(pl.col("end") - pl.col("start"))
        .otherwise(pl.col("end") - prev)
    )


def distribution(values: pl.Series) -> dict[str, float]:
    """mean, std, CV and p50/p90/p99/max of ``values`` (ns), as plain floats."""
    values = values.drop_nulls().cast(pl.Float64)
    if values.len() == 0:
        return {}
    mean = float(values.mean())  # type: ignore[arg-type]
    std = float(values.std() or 0.0) if values.len() > 1 else 0.0
    return {
        "mean": mean,
        "std": std,
        "cv": std / mean if mean > 0 else 0.0,
        "p50": float(values.quantile(0.5, "linear")),  # type: ignore[arg-type]
        "p90": float(values.quantile(0.9, "linear")),  # type: ignore[arg-type]
        "p99": float(values.quantile(0.99, "linear")),  # type: ignore[arg-type]
        "max": float(values.max()),  # type: ignore[arg-type]
        "count": int(values.len()),
    }


def per_rank_summary(
    rank_steps: pl.DataFrame, rank_step_late: pl.DataFrame, last: pl.DataFrame
) -> pl.DataFrame:
    """Per rank: iteration time, lateness distribution and share of iterations it was last."""
    times = rank_steps.group_by("rank").agg(step_mean_ns=pl.col("step_ns").mean(), steps=pl.len())
    late = rank_step_late.group_by("rank").agg(
        lateness_mean_ns=pl.col("lateness_ns").mean(),
        lateness_p50_ns=pl.col("lateness_ns").median(),
        lateness_p90_ns=pl.col("lateness_ns").quantile(0.9, "linear"),
        lateness_max_ns=pl.col("lateness_ns").max(),
        wait_mean_ns=pl.col("wait_ns").mean(),
    )
    n_steps = max(last.height, 1)
    last_share = (
        last.group_by("last_rank").agg(last_share=pl.len() / n_steps).rename({"last_rank": "rank"})
    )
    return (
        times.join(late, on="rank", how="full", coalesce=True)
        .join(last_share, on="rank", how="left")
        .with_columns(pl.col("last_share").fill_null(0.0))
        .sort("rank")
    )


def split_trailing(events: pl.DataFrame, steps: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``events`` split into those inside an iteration and the trailing ones.

    A call is trailing when every rank that made it made it after its own last
    iteration boundary (its step index is past the rank's last ended step): a
    checkpoint after the last ``optimizer.step()``. A call some rank made inside an
    iteration (a side thread's all-reduce that one rank issued just before its last
    boundary and another just after) stays in, whole. A trace without any boundary
    has no trailing part: all of it is one unbounded stretch."""
    if steps.height == 0 or events.height == 0:
        return events, events.clear()
    last = steps.group_by("rank").agg(last_step=pl.col("step").max())
    late = pl.col("last_step").is_not_null() & (pl.col("step") > pl.col("last_step"))
    marked = events.join(last, on="rank", how="left").with_columns(_late=late)
    if not marked["_late"].any():
        return events, events.clear()
    # one call, all its ranks (see collectives.call_key)
    marked = marked.with_columns(_trailing=pl.col("_late").all().over(call_key()))
    helpers = ["last_step", "_late", "_trailing"]
    inside = marked.filter(~pl.col("_trailing")).drop(helpers)
    return inside, marked.filter(pl.col("_trailing")).drop(helpers)


def trailing_summary(trailing: pl.DataFrame) -> dict[str, object]:
    """What happened after the last iteration: calls per rank, ops, bytes, time span."""
    if trailing.height == 0:
        return {}
    ranks = max(trailing["rank"].n_unique(), 1)
    ops = trailing.group_by("op").agg(n=pl.len()).sort("n", descending=True)
    entered = trailing.filter(pl.col("enter_ns") >= 0)["enter_ns"]
    exited = trailing.filter(pl.col("exit_ns") >= 0)["exit_ns"]
    span = (
        float(exited.max() - entered.min())  # type: ignore[operator]
        if entered.len() and exited.len()
        else 0.0
    )
    return {
        "calls": trailing.height,
        "calls_per_rank": round(trailing.height / ranks, 2),
        "ops": {row["op"]: row["n"] for row in ops.iter_rows(named=True)},
        "bytes": int(trailing["bytes"].sum()),
        "span_ns": max(span, 0.0),
    }
