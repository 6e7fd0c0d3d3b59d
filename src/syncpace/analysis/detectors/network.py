"""Network findings: contention on the fabric, latency-bound and bandwidth-bound collectives."""

from __future__ import annotations

import math

import polars as pl

from syncpace.analysis.detectors import advice
from syncpace.analysis.detectors.context import Context, confidence_of, ms
from syncpace.analysis.findings import Finding


def _sized(ctx: Context) -> pl.DataFrame:
    """Instances with a transfer time and bandwidth at or above the latency knee, each
    with ``cross_node`` and its ``inflation``: service time over the run's own best (5th
    percentile) for the same op, group size, size class (power of two) and locality, or
    over the time at ``link_gbps`` when that is given and shorter."""
    inst = ctx.metrics.instances
    if inst.height == 0:
        return inst
    spans = ctx.metrics.group_nodes
    world_nodes = ctx.metrics.placement["node"].n_unique()
    cross = pl.col("group").replace_strict(
        {g: n > 1 for g, n in spans.items()}, default=world_nodes > 1, return_dtype=pl.Boolean
    )
    big = inst.filter(
        pl.col("complete"),
        pl.col("bytes") >= ctx.thresholds.latency_knee_bytes,
        pl.col("busbw_gbps").is_not_null(),
    ).with_columns(cross_node=cross, size_class=pl.col("bytes").log(2).floor().cast(pl.Int32))
    best = pl.col("service_ns").quantile(0.05, "lower").over("op", "n", "size_class", "cross_node")
    big = big.with_columns(best_ns=best)
    if ctx.thresholds.link_gbps > 0:
        # contention that lasts the whole run inflates the run's own best too: with a
        # known link rate, the time the link predicts (busbw = link rate) bounds it
        at_link = pl.col("service_ns") * pl.col("busbw_gbps") / ctx.thresholds.link_gbps
        big = big.with_columns(best_ns=pl.min_horizontal("best_ns", at_link))
    return big.with_columns(inflation=pl.col("service_ns") / pl.col("best_ns"))


def fabric_contention(ctx: Context) -> list[Finding]:
    sized, th = _sized(ctx), ctx.thresholds
    if sized.height < 8 or ctx.iteration_ns <= 0:
        return []
    has_cross = bool(sized["cross_node"].any())
    suspect = sized.filter(pl.col("cross_node")) if has_cross else sized
    inflation = float(suspect["inflation"].median())  # type: ignore[arg-type]
    if inflation < th.fabric_inflation:
        return []
    corr = suspect.select(pl.corr("skew_ns", "service_ns")).item()
    corr = 0.0 if corr is None or math.isnan(corr) else float(corr)
    own = suspect.filter(pl.col("late_own_ns").is_not_null())
    own_corr = own.select(pl.corr("late_own_ns", "service_ns")).item() if own.height > 2 else None
    own_corr = 0.0 if own_corr is None or math.isnan(own_corr) else float(own_corr)
    # A CPU-starved straggler arrives late by its own doing *and* reduces slowly, so the
    # lateness it spends on its own rises and falls with transfer time. Under contention
    # the late rank's own lateness does not follow the transfers: unequal link shares end
    # collectives unevenly and the next arrivals inherit that skew, and a straggler that
    # merely sleeps is late by the same amount whatever the fabric does.
    if own_corr >= th.fabric_skew_correlation:
        return []
    intra = sized.filter(~pl.col("cross_node"))
    steps = max(ctx.metrics.steps.height, 1)
    excess = float((suspect["service_ns"] - suspect["best_ns"]).sum()) / steps
    cost = excess / ctx.iteration_ns
    inflated_share = float((suspect["inflation"] >= th.fabric_inflation).mean())  # type: ignore[arg-type]
    evidence = {
        "median_inflation": round(inflation, 3),
        "p90_inflation": round(float(suspect["inflation"].quantile(0.9, "linear")), 3),  # type: ignore[arg-type]
        "inflated_share": round(inflated_share, 4),
        "skew_transfer_correlation": round(corr, 3),
        "own_lateness_transfer_correlation": round(own_corr, 3),
        "excess_transfer_ms_per_iteration": ms(excess),
        "cross_node_busbw_gbps_p50": _p50(sized.filter(pl.col("cross_node"))["busbw_gbps"]),
        "intra_node_busbw_gbps_p50": _p50(intra["busbw_gbps"]),
        "intra_node_median_inflation": _p50(intra["inflation"]),
        "groups": sorted(suspect["group"].unique().to_list())[:20],
    }
    where = "cross-node groups" if has_cross else "collectives"
    return [
        ctx.finding(
            "fabric_contention",
            cost,
            inflated_share,
            f"{where} transfer {inflation:.2f}x slower than the run's own best at the same "
            f"size (not explained by arrival skew); {cost:.1%} of each iteration lost",
            nodes=ctx.nodes_of(list(ctx.metrics.ranks)) if has_cross else (),
            evidence=evidence,
            actions=(
                "Look for other jobs or traffic on the same links and switches; check "
                "switch port counters and the oversubscription of the topology.",
                "Use topology-aware placement (ranks of a job under the same leaf) and "
                "hierarchical collectives that keep most traffic inside nodes.",
                "Check NCCL_ALGO / NCCL_CROSS_NIC and the NICs each rank uses.",
            ),
        )
    ]


def latency_bound(ctx: Context) -> list[Finding]:
    m, th = ctx.metrics, ctx.thresholds
    inst = m.instances
    if inst.height == 0 or ctx.iteration_ns <= 0:
        return []
    small = inst.filter(pl.col("bytes") < th.latency_knee_bytes)
    steps = max(m.steps.height, 1)
    # calls per rank and iteration: each instance counts once for each member rank
    per_rank_step = float(small["n"].sum()) / (steps * max(len(m.ranks), 1))
    share = float(small["service_ns"].sum()) / steps / ctx.iteration_ns
    if per_rank_step < th.latency_min_per_step or share < th.latency_min_share:
        return []
    alpha = float(small["service_ns"].median() or 0.0)  # type: ignore[arg-type]
    big = inst.filter(pl.col("bytes") >= th.latency_knee_bytes)["algbw_gbps"]
    bandwidth = float(big.quantile(0.95, "linear") or 0.0) if big.len() else th.link_gbps  # type: ignore[arg-type]
    return [
        ctx.finding(
            "latency_bound",
            share,
            confidence_of(per_rank_step, th.latency_min_per_step),
            f"{per_rank_step:.0f} collectives per iteration below {th.latency_knee_bytes} "
            f"bytes take {share:.1%} of the iteration, each ~{alpha / 1e3:.0f} us of latency",
            evidence={
                "small_per_iteration": round(per_rank_step, 2),
                "small_bytes_p50": int(small["bytes"].median() or 0),  # type: ignore[arg-type]
                "small_service_us_p50": round(alpha / 1e3, 2),
                "share_of_iteration": round(share, 4),
                "knee_bytes_threshold": th.latency_knee_bytes,
                "estimated_knee_bytes": int(alpha * bandwidth) if bandwidth else None,
            },
            actions=advice.latency_bound(m.parallelism),
        )
    ]


def bandwidth_bound(ctx: Context) -> list[Finding]:
    m, th = ctx.metrics, ctx.thresholds
    comm = m.comm
    exposed = comm.get("exposed_share", 0.0)
    if exposed < th.bandwidth_min_exposed or comm.get("overlap_ratio", 1.0) < th.overlap_max_ratio:
        return []  # hidden communication costs nothing; unoverlapped is poor_overlap's case
    big = m.instances.filter(
        pl.col("bytes") >= th.latency_knee_bytes, pl.col("busbw_gbps").is_not_null()
    )
    if big.height == 0:
        return []
    median = float(big["busbw_gbps"].median())  # type: ignore[arg-type]
    reference = th.link_gbps or float(big["busbw_gbps"].quantile(0.95, "linear"))  # type: ignore[arg-type]
    if reference <= 0 or median < th.bandwidth_near_best * reference:
        return []
    return [
        ctx.finding(
            "bandwidth_bound",
            exposed,
            min(1.0, median / reference),
            f"large collectives run at {median:.1f} GB/s busbw ({median / reference:.0%} of "
            f"{'the link rate' if th.link_gbps else 'the best seen'}) and still leave "
            f"{exposed:.1%} of the iteration exposed: bytes, not latency, are the limit",
            evidence={
                "busbw_gbps_p50": round(median, 3),
                "reference_busbw_gbps": round(reference, 3),
                "reference": "link_gbps" if th.link_gbps else "run's p95 busbw",
                "bytes_p50": int(big["bytes"].median() or 0),  # type: ignore[arg-type]
                "exposed_share": round(exposed, 4),
                "overlap_ratio": round(comm.get("overlap_ratio", 0.0), 4),
                "busbw_assumes": "flat topology (nccl-tests factors)",
            },
            actions=advice.bandwidth_bound(m.parallelism),
        )
    ]


def _p50(values: pl.Series) -> float | None:
    return round(float(values.median()), 3) if values.len() else None  # type: ignore[arg-type]
