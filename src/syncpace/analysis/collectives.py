"""Collective instances: the same call matched across ranks by (group, sequence number).

Point-to-point calls count their sequence numbers per (group, peer pair), so a send and
its recv are matched by (group, seq, pair). Only ranks that have the event take part;
an instance with fewer members than expected is kept and counted as incomplete.
"""

from __future__ import annotations

import polars as pl

P2P_OPS = ("send", "recv")
INSTANCE_KEY = ("group", "seq", "pair")

#: nccl-tests bus-bandwidth factors: busbw = algbw x factor(n). They assume a flat
#: topology (every link as fast as every other), see docs/analysis.md.
_ALL_TO_ALL_FACTOR = ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
_UNIT_FACTOR = ("broadcast", "reduce", "send", "recv")


def busbw_factor(op: str, n: int) -> float | None:
    """The nccl-tests factor of ``op`` over ``n`` ranks (``None`` for a barrier)."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in _ALL_TO_ALL_FACTOR:
        return (n - 1) / n
    if op in _UNIT_FACTOR:
        return 1.0
    return None


def _factor_expr(op: pl.Expr, n: pl.Expr) -> pl.Expr:
    n = n.cast(pl.Float64)
    return (
        pl.when(op == "all_reduce")
        .then(2 * (n - 1) / n)
        .when(op.is_in(_ALL_TO_ALL_FACTOR))
        .then((n - 1) / n)
        .when(op.is_in(_UNIT_FACTOR))
        .then(pl.lit(1.0))
        .otherwise(None)
    )


def with_pair(events: pl.DataFrame) -> pl.DataFrame:
    """Add the ``pair`` key: the peer pair of a send/recv, -1 for collectives."""
    if not events["op"].is_in(P2P_OPS).any():
        return events.with_columns(pair=pl.lit(-1, pl.Int64))
    lo = pl.min_horizontal("rank", "peer").cast(pl.Int64)
    hi = pl.max_horizontal("rank", "peer").cast(pl.Int64)
    is_p2p = pl.col("op").is_in(P2P_OPS) & (pl.col("peer") >= 0)
    return events.with_columns(pair=pl.when(is_p2p).then(lo * (1 << 32) + hi).otherwise(-1))


def instances(events: pl.DataFrame) -> pl.DataFrame:
    """One row per collective instance with skew, last arriver, transfer time and bandwidth.

    ``events`` must carry ``pair`` (see :func:`with_pair`). Times of -1 ("never observed")
    are ignored, so an instance whose exits were never seen has a null transfer time.
    """
    enter = pl.when(pl.col("enter_ns") >= 0).then(pl.col("enter_ns"))
    exit_ = pl.when(pl.col("exit_ns") >= 0).then(pl.col("exit_ns"))
    inst = events.group_by(INSTANCE_KEY).agg(
        op=pl.col("op").first(),
        step=pl.col("step").min(),
        group_size=pl.col("group_size").first(),
        bytes=pl.col("bytes").max(),
        bytes_min=pl.col("bytes").min(),
        n=pl.len(),
        first_enter=enter.min(),
        last_enter=enter.max(),
        last_rank=pl.col("rank").get(pl.col("enter_ns").arg_max()),
        exit=exit_.max(),
    )
    expected = pl.when(pl.col("pair") >= 0).then(2).otherwise(pl.col("group_size"))
    transfer = (pl.col("exit") - pl.col("last_enter")).clip(lower_bound=0)
    # Collectives of one group run in order on one stream: until the previous one is
    # done, a collective only queues. Bandwidth is computed on the service time after it.
    previous_done = pl.col("exit").cum_max().shift(1).over("group", "pair", order_by="seq")
    queued = (previous_done - pl.col("last_enter")).clip(lower_bound=0).fill_null(0)
    inst = inst.with_columns(
        expected=expected,
        skew_ns=pl.col("last_enter") - pl.col("first_enter"),
        transfer_ns=transfer,
        queued_ns=pl.min_horizontal(queued, transfer),
    ).with_columns(service_ns=pl.col("transfer_ns") - pl.col("queued_ns"))
    algbw = pl.col("bytes").cast(pl.Float64) / pl.col("service_ns").cast(
        pl.Float64
    )  # bytes/ns = GB/s
    algbw = pl.when(pl.col("service_ns") > 0).then(algbw)
    return inst.with_columns(
        complete=pl.col("n") == pl.col("expected"),
        algbw_gbps=algbw,
        busbw_gbps=algbw * _factor_expr(pl.col("op"), pl.col("n")),
    ).sort("first_enter")


def per_event(events: pl.DataFrame, inst: pl.DataFrame) -> pl.DataFrame:
    """Events with their instance's timing: ``lateness_ns`` (own enter - first enter) and
    ``wait_ns`` (last enter - own enter), plus the transfer interval [last_enter, exit]."""
    cols = [*INSTANCE_KEY, "first_enter", "last_enter", "transfer_ns", "bytes", "n"]
    joined = events.select("rank", "step", *INSTANCE_KEY, "op", "enter_ns", "exit_ns").join(
        inst.select(cols), on=list(INSTANCE_KEY), how="left"
    )
    return joined.with_columns(
        lateness_ns=pl.col("enter_ns") - pl.col("first_enter"),
        wait_ns=pl.col("last_enter") - pl.col("enter_ns"),
    )


def rank_step_lateness(ev: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step): mean lateness, final wait, collective count.

    Lateness of a rank in an iteration is the mean, over the collectives it joined, of how
    long after the first arriver it entered; the rank with the largest value "arrived last".
    ``wait_ns`` is the wait at the rank's last collective of the iteration: after it the
    rank has nothing left to overlap, so that wait is idle time even when the collectives
    are issued asynchronously (earlier waits may be hidden behind compute).
    """
    return ev.group_by("rank", "step").agg(
        lateness_ns=pl.col("lateness_ns").mean(),
        wait_ns=pl.col("wait_ns").get(pl.col("enter_ns").arg_max()),
        collectives=pl.len(),
    )


def last_arrivers(rank_step: pl.DataFrame) -> pl.DataFrame:
    """Per step: the rank that arrived last (largest mean lateness)."""
    return (
        rank_step.group_by("step")
        .agg(last_rank=pl.col("rank").get(pl.col("lateness_ns").arg_max()))
        .sort("step")
    )
