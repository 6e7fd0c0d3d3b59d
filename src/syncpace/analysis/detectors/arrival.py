"""Arrival findings: persistent stragglers, locality patterns, transient jitter."""

from __future__ import annotations

import polars as pl

from syncpace.analysis.detectors.context import Context, confidence_of, ms
from syncpace.analysis.findings import Finding


def late_ranks(ctx: Context) -> list[int]:
    """Ranks whose median lateness stands out against the typical rank's, persistently."""
    per_rank = ctx.metrics.per_rank.drop_nulls("lateness_p50_ns")
    if per_rank.height < 2 or ctx.iteration_ns <= 0:
        return []
    th = ctx.thresholds
    typical = float(per_rank["lateness_p50_ns"].median())  # type: ignore[arg-type]
    margin = th.straggler_min_share * ctx.iteration_ns
    late = per_rank.filter(
        (pl.col("lateness_p50_ns") - typical >= margin)
        & (pl.col("lateness_p50_ns") >= th.straggler_factor * typical)
    )
    return sorted(late["rank"].to_list())


def _wait_cost(ctx: Context, exclude: list[int]) -> float:
    """Mean idle wait of the other ranks at the end of the iteration, over the iteration."""
    rs = ctx.metrics.rank_step.filter(~pl.col("rank").is_in(exclude))
    if rs.height == 0 or ctx.iteration_ns <= 0:
        return 0.0
    return float(rs["wait_ns"].mean()) / ctx.iteration_ns  # type: ignore[arg-type]


def _last_share(ctx: Context, ranks: list[int]) -> float:
    pr = ctx.metrics.per_rank
    return float(pr.filter(pl.col("rank").is_in(ranks))["last_share"].sum())


def stragglers_and_locality(ctx: Context) -> list[Finding]:
    late = late_ranks(ctx)
    if not late:
        return []
    findings = []
    pattern = _locality_pattern(ctx, late)
    if pattern:
        local_rank, ranks = pattern
        findings.append(_locality_finding(ctx, local_rank, ranks))
        late = [r for r in late if r not in ranks]
    if late:
        findings.append(_straggler_finding(ctx, late))
    return findings


def _locality_pattern(ctx: Context, late: list[int]) -> tuple[int, list[int]] | None:
    """The local rank late on most nodes (>= 2), with its ranks, if there is one."""
    place = ctx.metrics.placement
    nodes = place["node"].n_unique()
    if nodes < 2:
        return None
    marked = place.with_columns(late=pl.col("rank").is_in(late))
    per_local = marked.group_by("local_rank").agg(
        late_nodes=pl.col("node").filter(pl.col("late")).n_unique(),
        ranks=pl.col("rank").filter(pl.col("late")).sort(),
    )
    need = max(2, ctx.thresholds.locality_node_fraction * nodes)
    hits = per_local.filter(pl.col("late_nodes") >= need).sort("late_nodes", descending=True)
    if hits.height == 0:
        return None
    row = hits.row(0, named=True)
    return int(row["local_rank"]), list(row["ranks"])


def _straggler_finding(ctx: Context, late: list[int]) -> Finding:
    pr = ctx.metrics.per_rank
    cost = _wait_cost(ctx, late)
    share = _last_share(ctx, late)
    lateness = pr.filter(pl.col("rank").is_in(late))["lateness_p50_ns"]
    place = ctx.metrics.placement
    nodes = ctx.nodes_of(late)
    whole = [
        n for n in nodes if set(place.filter(pl.col("node") == n)["rank"].to_list()) <= set(late)
    ]
    ranks = ", ".join(map(str, late))
    where = f"node {', '.join(whole)}" if whole else f"rank{'s' if len(late) > 1 else ''} {ranks}"
    return ctx.finding(
        "straggler",
        cost,
        share,
        f"{where} arrives late in {share:.0%} of iterations, by {ms(float(lateness.median())):.2f} "  # type: ignore[arg-type]
        f"ms; the others idle {cost:.1%} of each iteration waiting",
        ranks=tuple(late),
        nodes=nodes,
        evidence={
            "late_ranks": late,
            "whole_nodes": whole,
            "lateness_p50_ms": dict(zip(late, map(ms, lateness.to_list()), strict=True)),
            "typical_lateness_p50_ms": ms(float(pr["lateness_p50_ns"].median() or 0.0)),
            "last_share": round(share, 4),
            "wait_share_of_iteration": round(cost, 4),
            "iteration_ms": ms(ctx.iteration_ns),
        },
        actions=(
            "Inspect the named ranks/nodes: thermal throttling, a busy neighbour process, "
            "slower data loading, a degraded GPU or link (nvidia-smi -q, dmesg).",
            "Exclude or replace the node if it stays late; rebalance data loading.",
            "Pacing does not fix a persistent straggler; it only hides the wait.",
        ),
    )


def _locality_finding(ctx: Context, local_rank: int, ranks: list[int]) -> Finding:
    cost = _wait_cost(ctx, ranks)
    by_local = ctx.metrics.by_local_rank
    this = by_local.filter(pl.col("local_rank") == local_rank)
    others = by_local.filter(pl.col("local_rank") != local_rank)
    nodes = ctx.nodes_of(ranks)
    return ctx.finding(
        "locality_variance",
        cost,
        _last_share(ctx, ranks),
        f"local rank {local_rank} is late on {len(nodes)} nodes (ranks "
        f"{', '.join(map(str, ranks))}): a placement pattern, not a bad node; the others "
        f"idle {cost:.1%} of each iteration",
        ranks=tuple(ranks),
        nodes=nodes,
        evidence={
            "local_rank": local_rank,
            "late_ranks": ranks,
            "lateness_p50_ms": ms(float(this["lateness_p50_ns"].mean() or 0.0)),
            "other_local_ranks_lateness_p50_ms": ms(float(others["lateness_p50_ns"].mean() or 0.0)),
            "last_share": round(_last_share(ctx, ranks), 4),
            "wait_share_of_iteration": round(cost, 4),
        },
        actions=(
            f"Check the CPU/NUMA affinity and NIC path of local rank {local_rank} "
            "(nvidia-smi topo -m, numactl -H): bind it to the NUMA node of its GPU and NIC.",
            "Pin data-loader workers to the right NUMA node; set NCCL_IB_HCA / "
            "NCCL_SOCKET_IFNAME to the NIC nearest the GPU.",
        ),
    )


def sync_amplification(ctx: Context) -> list[Finding]:
    m, th = ctx.metrics, ctx.thresholds
    if m.per_rank.height < 2 or ctx.iteration_ns <= 0:
        return []
    cost = _wait_cost(ctx, [])
    n = max(len(m.ranks), 1)
    # "takes turns": a rank counts when it was last in at least a quarter of its fair
    # share of iterations, and no rank is last in most of them (that is a straggler)
    last_ranks = int((m.per_rank["last_share"] >= 1 / (4 * n)).sum())
    spread = last_ranks / n
    max_share = float(m.per_rank["last_share"].max() or 0.0)
    if cost < th.sync_wait_share or spread < th.sync_spread or max_share >= 0.5:
        return []
    cv = m.iteration.get("cv", 0.0)
    return [
        ctx.finding(
            "sync_amplification",
            cost,
            confidence_of(spread * cost, th.sync_wait_share),
            f"transient jitter: {last_ranks} of {len(m.ranks)} ranks take turns arriving "
            f"last; ranks idle {cost:.1%} of each iteration waiting (iteration CV {cv:.3f})",
            evidence={
                "wait_share_of_iteration": round(cost, 4),
                "iteration_cv": round(cv, 4),
                "ranks_ever_last": last_ranks,
                "max_last_share": round(max_share, 4),
                "skew_p50_ms": ms(float(m.instances["skew_ns"].median() or 0.0)),
            },
            actions=(
                "Enable syncpace pacing (bounded adaptive delay) and measure it on/off.",
                "Reduce per-rank jitter: pin CPU threads, isolate cores, make data loading "
                "asynchronous, disable frequency scaling.",
                "Synchronize less often: gradient accumulation or local SGD.",
            ),
        )
    ]
