"""Where the run's time went, as profilers tabulate it: measurement, no judgement.

* **Per operation** (one row per collective op and size class, as Nsight Systems' NCCL
  summary and HTA tabulate them): calls, total, mean, median and p99 time, median bus
  bandwidth. A call is one collective instance (the same call on every rank of its
  group counts once); its time runs from the last rank's arrival to its completion —
  the collective's own time, the wait for late ranks left out (that wait is the
  per-rank breakdown's).
* **Per rank, the whole run** (HTA's temporal breakdown): each analysed iteration of a
  rank split into waiting for the last rank (at its last collective of the iteration,
  where nothing is left to overlap), exposed communication (transfer after that point:
  the iteration waits for it) and the rest, compute — including overlapped
  communication. The three parts of every iteration add up to its time by construction;
  where wait and exposed transfer together would exceed it (an earlier asynchronous
  call still moving data while the rank waits) the wait is cut to what is left, and the
  iterations cut are counted. The shares of each rank's run add up to 1; the sum is
  checked and reported (``sum_of_shares``).
* **Per step**: the same three parts, averaged over ranks — the stacked bars of the
  report.

Times of the JSON views are in milliseconds (``_ms``), bandwidths in bytes per second
(``_bytes_per_s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from syncpace.analysis import collectives, iterations, overlap, timebase
from syncpace.trace.reader import Trace

#: Size classes: a factor of 16 apart, from latency-bound calls to bandwidth-bound ones.
SIZE_EDGES = (64 << 10, 1 << 20, 16 << 20, 256 << 20)
#: How far the shares of a rank's run may stray from 1 before the check fails (rounding).
SHARE_TOLERANCE = 1e-9


#: The classes' labels, one more than the edges.
SIZE_CLASSES = ("< 64 KiB", "64 KiB–1 MiB", "1–16 MiB", "16–256 MiB", "≥ 256 MiB")


def size_class(nbytes: int) -> str:
    """The size class of a call of ``nbytes`` (nccl-tests' size), as a label."""
    return SIZE_CLASSES[sum(nbytes >= edge for edge in SIZE_EDGES)]


def _class_index() -> pl.Expr:
    index = pl.lit(0, pl.Int32)
    for edge in SIZE_EDGES:
        index = index + (pl.col("bytes") >= edge).cast(pl.Int32)
    return index


def op_table(instances: pl.DataFrame) -> pl.DataFrame:
    """Per (op, size class): ``calls``, ``bytes_mean``, ``total_ms``, ``mean_ms``,
    ``median_ms``, ``p99_ms``, ``busbw_median_bytes_per_s`` (None where no call had a
    trusted bandwidth), ``share_of_time`` (of all collectives' time); sorted by total
    time, the largest first."""
    if instances.height == 0:
        return pl.DataFrame(
            schema={
                "op": pl.String,
                "size_class": pl.String,
                "calls": pl.Int64,
                "bytes_mean": pl.Float64,
                "total_ms": pl.Float64,
                "mean_ms": pl.Float64,
                "median_ms": pl.Float64,
                "p99_ms": pl.Float64,
                "busbw_median_bytes_per_s": pl.Float64,
                "share_of_time": pl.Float64,
            }
        )
    ms = pl.col("transfer_ns").cast(pl.Float64) / 1e6
    table = (
        instances.filter(pl.col("transfer_ns").is_not_null())
        .with_columns(_class=_class_index())
        .group_by("op", "_class")
        .agg(
            calls=pl.len().cast(pl.Int64),
            bytes_mean=pl.col("bytes").cast(pl.Float64).mean(),
            total_ms=ms.sum(),
            mean_ms=ms.mean(),
            median_ms=ms.median(),
            p99_ms=ms.quantile(0.99, "linear"),
            # busbw_gbps is bytes per ns: 1e9 bytes per second
            busbw_median_bytes_per_s=pl.col("busbw_gbps").median() * 1e9,
        )
    )
    total = float(table["total_ms"].sum()) if table.height else 0.0
    return (
        table.with_columns(
            size_class=pl.col("_class").replace_strict(
                dict(enumerate(SIZE_CLASSES)), return_dtype=pl.String
            ),
            share_of_time=pl.col("total_ms") / total if total > 0 else pl.lit(0.0),
        )
        .sort(["total_ms", "op", "_class"], descending=[True, False, False])
        .select(
            "op",
            "size_class",
            "calls",
            "bytes_mean",
            "total_ms",
            "mean_ms",
            "median_ms",
            "p99_ms",
            "busbw_median_bytes_per_s",
            "share_of_time",
        )
    )


def step_parts(overlap_frame: pl.DataFrame, rank_step: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step): ``step_ns``, ``wait_ns``, ``exposed_ns``, ``compute_ns``
    (adding up to ``step_ns``) and ``cut`` (the wait was cut to fit)."""
    waits = rank_step.select("rank", "step", pl.col("wait_ns").alias("_wait"))
    step = pl.col("step_ns").clip(lower_bound=0)
    exposed = pl.min_horizontal(pl.col("exposed_ns").clip(lower_bound=0), step)
    raw_wait = pl.col("_wait").fill_null(0).clip(lower_bound=0)  # -1: no wait measured
    return (
        overlap_frame.select("rank", "step", "step_ns", "exposed_ns")
        .join(waits, on=["rank", "step"], how="left")
        .with_columns(step_ns=step, exposed_ns=exposed, _raw=raw_wait)
        .with_columns(wait_ns=pl.min_horizontal("_raw", pl.col("step_ns") - pl.col("exposed_ns")))
        .with_columns(
            compute_ns=pl.col("step_ns") - pl.col("exposed_ns") - pl.col("wait_ns"),
            cut=pl.col("_raw") > pl.col("wait_ns"),
        )
        .select("rank", "step", "step_ns", "compute_ns", "exposed_ns", "wait_ns", "cut")
        .sort("rank", "step")
    )


def rank_table(parts: pl.DataFrame) -> pl.DataFrame:
    """Per rank over the whole analysed run: ``steps``, ``run_ms``, ``compute_ms``,
    ``exposed_ms``, ``wait_ms``, their ``*_share`` of the run and ``sum_of_shares``."""
    table = parts.group_by("rank").agg(
        steps=pl.len().cast(pl.Int64),
        run_ms=pl.col("step_ns").sum().cast(pl.Float64) / 1e6,
        compute_ms=pl.col("compute_ns").sum().cast(pl.Float64) / 1e6,
        exposed_ms=pl.col("exposed_ns").sum().cast(pl.Float64) / 1e6,
        wait_ms=pl.col("wait_ns").sum().cast(pl.Float64) / 1e6,
        steps_cut=pl.col("cut").sum().cast(pl.Int64),
    )
    run = pl.col("run_ms")
    share = {f"{k}_share": pl.when(run > 0).then(pl.col(f"{k}_ms") / run).otherwise(0.0)
             for k in ("compute", "exposed", "wait")}  # fmt: skip
    return (
        table.with_columns(**share)
        .with_columns(
            sum_of_shares=pl.when(run > 0)
            .then(pl.col("compute_share") + pl.col("exposed_share") + pl.col("wait_share"))
            .otherwise(1.0)
        )
        .sort("rank")
    )


def step_table(parts: pl.DataFrame) -> pl.DataFrame:
    """Per step, averaged over the ranks that made it: ``step_ms``, ``compute_ms``,
    ``exposed_ms``, ``wait_ms`` (the three add up to ``step_ms``)."""
    return (
        parts.group_by("step")
        .agg(
            ranks=pl.len().cast(pl.Int64),
            **{
                f"{k}_ms": pl.col(f"{k}_ns").cast(pl.Float64).mean() / 1e6
                for k in ("step", "compute", "exposed", "wait")
            },
        )
        .sort("step")
    )


@dataclass(frozen=True)
class Breakdown:
    """The per-operation table, the per-rank whole-run breakdown and the per-step parts
    of one run (frames as :func:`op_table`, :func:`rank_table`, :func:`step_table`)."""

    operations: pl.DataFrame
    ranks: pl.DataFrame
    steps: pl.DataFrame

    @property
    def shares_add_up(self) -> bool:
        """Whether every rank's shares of its run add up to 1."""
        sums = self.ranks["sum_of_shares"].to_list() if self.ranks.height else []
        return all(math.isfinite(s) and abs(s - 1.0) <= SHARE_TOLERANCE for s in sums)

    def to_json(self) -> dict[str, Any]:
        return {
            "operations": self.operations.to_dicts(),
            "ranks": self.ranks.to_dicts(),
            "steps": self.steps.to_dicts(),
            "shares_add_up": self.shares_add_up,
            "definitions": {
                "operation_time": "from the last rank's arrival to the call's completion",
                "wait": "waiting for the last rank at the rank's last collective of the step",
                "exposed": "transfer after that point, which the iteration waits for",
                "compute": "the rest of the step, overlapped communication included",
            },
        }


def measure(
    instances: pl.DataFrame, overlap_frame: pl.DataFrame, rank_step: pl.DataFrame
) -> Breakdown:
    """The breakdown from a run's matched instances, its per (rank, step) overlap frame
    (``rank, step, step_ns, exposed_ns``) and its arrivals (``rank, step, wait_ns``)."""
    parts = step_parts(overlap_frame, rank_step)
    return Breakdown(op_table(instances), rank_table(parts), step_table(parts))


def of_trace(trace: Trace, *, warmup_steps: int = 1) -> Breakdown:
    """The breakdown of ``trace`` alone, without the rest of the analysis (what
    ``trace-info`` prints): the same iterations, clock and matching as
    :func:`syncpace.analysis.metrics.compute_metrics`."""
    steps, events = iterations.after_warmup(trace.steps, trace.events, warmup_steps)
    device = timebase.of_events(trace.meta, events).device
    if device:
        events = timebase.on_device(events)
    events, _ = iterations.split_trailing(events, steps)
    rank_steps = iterations.rank_steps(steps)
    matched = collectives.match(events)
    rank_step = collectives.rank_step_arrivals(matched)
    comm = overlap.rank_step_comm(matched)
    if device:
        rank_steps = timebase.device_steps(rank_steps, rank_step)
    return measure(matched.instances, overlap.with_step_time(comm, rank_steps), rank_step)
