"""Arrival findings: persistent stragglers, locality patterns, one-off stalls, recurring
jitter.

With a replay of the run (``metrics.program``) a rank's own compute per step is the sum
of its gaps between calls: time it ran on its own, not time it waited for others. A
straggler computes persistently more than the fast ranks do; ranks that are merely
late because their previous collective ended late for them (next to a slow link) are
not stragglers (see ``network.slow_link``). Baselines are the median of the faster
half of the ranks, so a pattern that covers half the ranks (one local rank of two on
every node) still stands out. Costs are what the replay saves with the cause removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from syncpace.analysis import costs
from syncpace.analysis.detectors import advice, device
from syncpace.analysis.detectors.context import (
    Context,
    confidence_of,
    fast_half,
    fast_noise,
    ms,
)
from syncpace.analysis.findings import Finding
from syncpace.analysis.replay import Change
from syncpace.analysis.replay import counterfactuals as cf
from syncpace.analysis.replay.whatif import evaluate


def rank_compute(ctx: Context) -> pl.DataFrame:
    """Per rank: ``excess_ns`` (median over steps of its compute minus the fast half's),
    ``compute_ns`` (its median compute per step) and the run's ``noise_ns`` (how far
    the fast half's compute strays from its own median, see :func:`fast_noise`)."""

    def compute() -> pl.DataFrame:
        prog = ctx.program
        assert prog is not None
        per = (
            pl.DataFrame({"rank": prog.rank, "step": prog.step, "gap": prog.gap})
            .group_by("rank", "step")
            .agg(compute=pl.col("gap").sum())
        )
        per = per.with_columns(
            base=fast_half(pl.col("compute")).over("step"),
            mid=pl.col("compute").median().over("step"),
        )
        noise = fast_noise(per, "compute", "base", "mid")
        return (
            per.group_by("rank")
            .agg(
                excess_ns=(pl.col("compute") - pl.col("base")).median(),
                compute_ns=pl.col("compute").median(),
            )
            .with_columns(noise_ns=pl.lit(noise))
            .sort("rank")
        )

    return ctx.memo("rank_compute", compute)


def late_ranks(ctx: Context) -> list[int]:
    """Ranks that are slow by their own doing, persistently: with a replay, their
    compute excess exceeds the fast half of the ranks' by ``straggler_min_share`` of the
    iteration and by ``straggler_factor`` times the run's noise; without one, their
    median lateness exceeds the fast half's by that share and factor."""
    th = ctx.thresholds
    if ctx.iteration_ns <= 0:
        return []
    margin = th.straggler_min_share * ctx.iteration_ns
    if ctx.program is not None:
        rc = rank_compute(ctx)
        if rc.height < 2:
            return []
        noise = float(rc["noise_ns"][0])
        # against the fast half of the ranks: under jitter alone every rank's median
        # excess over the per-step fast half is positive, by about the same amount
        typical = float(rc.select(fast_half(pl.col("excess_ns"))).item() or 0.0)
        need = max(margin, th.straggler_factor * noise)
        late = rc.filter(pl.col("excess_ns") - typical >= need)
        return sorted(late["rank"].to_list())
    per_rank = ctx.metrics.per_rank.drop_nulls("lateness_p50_ns")
    if per_rank.height < 2:
        return []
    typical = float(per_rank.select(fast_half(pl.col("lateness_p50_ns"))).item() or 0.0)
    # as with a replay: beyond the run's noise too (how far the fast half's lateness
    # strays from its own, step by step)
    need = max(margin, th.straggler_factor * lateness_noise(ctx))
    late = per_rank.filter(
        (pl.col("lateness_p50_ns") - typical >= need)
        & (pl.col("lateness_p50_ns") >= th.straggler_factor * typical)
    )
    return sorted(late["rank"].to_list())


def lateness_noise(ctx: Context) -> float:
    """The run's noise in arrivals without a replay: :func:`fast_noise` of the per
    (rank, step) lateness against each step's fast half."""
    rs = ctx.metrics.rank_step.drop_nulls("lateness_ns")
    if rs.height == 0:
        return 0.0
    rs = rs.with_columns(
        base=fast_half(pl.col("lateness_ns")).over("step"),
        mid=pl.col("lateness_ns").median().over("step"),
    )
    return fast_noise(rs, "lateness_ns", "base", "mid")


def _wait_cost(ctx: Context, exclude: list[int]) -> float:
    """Mean idle wait of the other ranks at the end of the iteration, over the iteration."""
    rs = ctx.metrics.rank_step.filter(~pl.col("rank").is_in(exclude))
    if rs.height == 0 or ctx.iteration_ns <= 0:
        return 0.0
    return float(rs["wait_ns"].mean()) / ctx.iteration_ns  # type: ignore[arg-type]


def _last_share(ctx: Context, ranks: list[int]) -> float:
    pr = ctx.metrics.per_rank
    return float(pr.filter(pl.col("rank").is_in(ranks))["last_share"].sum())


def starved_hosts(ctx: Context, nodes: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Of ``nodes``, the hosts starved of CPU, more than every other host with CPU data
    (there must be one): their CPU limit held the job's ranks throttled for at least
    ``cpu_throttle_share`` of the sampled span (the cgroup's counters), or their
    sampled rank's threads waited for a CPU at least ``cpu_wait_share`` of the time
    they could run."""
    hosts = ctx.metrics.hosts
    if hosts is None:
        return {}
    th = ctx.thresholds
    cpus = {h: v.get("cpu") or {} for h, v in hosts.hosts.items()}
    others = [c for h, c in cpus.items() if h not in nodes and c]
    if not others:  # starved against what: one host's job has no other to compare with
        return {}
    out = {}
    for node in nodes:
        cpu = cpus.get(node, {})
        wait = cpu.get("job_wait_share") or 0.0
        share = cpu.get("throttled_share") or 0.0
        throttled = share >= th.cpu_throttle_share and all(
            share > (c.get("throttled_share") or 0.0) for c in others
        )
        waited = wait >= th.cpu_wait_share and all(
            wait > (c.get("job_wait_share") or 0.0) for c in others
        )
        if throttled or waited:
            out[node] = cpu
    return out


def _starved_note(node: str, cpu: dict[str, Any], th: Any) -> str:
    if (cpu.get("throttled_share") or 0.0) >= th.cpu_throttle_share:
        quota = f" ({cpu['quota_cpus']:g} CPU)" if cpu.get("quota_cpus") else ""
        return (
            f"host {node}'s CPU limit{quota} held its ranks throttled "
            f"{cpu['throttled_share']:.0%} of the time"
        )
    return (
        f"host {node}'s ranks waited for a CPU {cpu.get('job_wait_share', 0.0):.0%} of the "
        "time they could run"
    )


def _not_slow(ctx: Context, ranks: list[int], cause: str, starved: bool = False) -> Any:
    """These ranks computing like the others; a one-off stall on them stays (it is the
    stall finding's cost, not theirs). ``starved``: their host's CPU limit throttled
    them, which slows their part in every transfer too: those transfers then take what
    the links allow (the benchmarked rate, else the run's best)."""
    label = ",".join(map(str, ranks))

    def change(p: Any) -> Change:
        made = cf.compute_like_others(p, ranks)
        big = stall_actions(ctx)
        if big is not None and made.gap is not None:
            made = Change(gap=np.where(big, p.gap, made.gap))
        if starved:
            theirs = cf.instances_with(p, ranks)
            th = ctx.thresholds
            links = (
                cf.transfers_at_rate(p, th.link_gbps, th.link_alpha_us * 1e3, which=theirs)
                if th.link_gbps > 0
                else cf.transfers_at_best(p, which=theirs)
            )
            made = cf.combine([made, links])
        return made

    return ctx.counterfactual(
        f"{cause}:{label}",
        f"rank{'s' if len(ranks) > 1 else ''} {label} computing like the others",
        change,
        cause=cause,
    )


def levels(ctx: Context, late: list[int]) -> list[list[int]]:
    """The late ranks in groups of like slowness, slowest first: a rank half as slow as
    the one before it starts a new group (one badly slow rank and one barely slow are
    two findings, a whole slow node one)."""
    if len(late) < 2:
        return [late] if late else []
    if ctx.program is not None:
        rc = rank_compute(ctx).filter(pl.col("rank").is_in(late))
    else:  # by lateness, as measured
        rc = ctx.metrics.per_rank.filter(pl.col("rank").is_in(late)).select(
            "rank", excess_ns="lateness_p50_ns"
        )
    rc = rc.sort("excess_ns", descending=True)
    groups: list[list[int]] = []
    previous = None
    for rank, excess in zip(rc["rank"].to_list(), rc["excess_ns"].to_list(), strict=True):
        if previous is None or excess < 0.5 * previous:
            groups.append([])
        groups[-1].append(int(rank))
        previous = excess
    return [sorted(g) for g in groups]


def _starved_together(ctx: Context, groups: list[list[int]]) -> list[list[int]]:
    """The late ranks of a host starved of CPU as one group, whatever their levels: one
    cause (the host) slows them all, by as much as the CPU each happens to get."""
    late = sorted(r for g in groups for r in g)
    place = ctx.metrics.placement
    merged: list[list[int]] = []
    for node in starved_hosts(ctx, ctx.nodes_of(late)):
        ranks = sorted(place.filter(pl.col("node") == node)["rank"].to_list())
        if ranks and set(ranks) <= set(late):
            merged.append(ranks)
    taken = {r for g in merged for r in g}
    rest = [[r for r in g if r not in taken] for g in groups]
    return merged + [g for g in rest if g]


def stragglers_and_locality(ctx: Context) -> list[Finding]:
    findings = []
    for late in _starved_together(ctx, levels(ctx, late_ranks(ctx))):
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
        all_ranks=pl.col("rank").len(),
    )
    need = max(2, ctx.thresholds.locality_node_fraction * nodes)
    hits = per_local.filter(pl.col("late_nodes") >= need).sort("late_nodes", descending=True)
    if hits.height == 0:
        return None
    row = hits.row(0, named=True)
    ranks = list(row["ranks"])
    # every rank of those nodes late is a whole-node straggler, not a local-rank pattern
    whole = place.filter(pl.col("node").is_in(ctx.nodes_of(ranks)))["rank"].to_list()
    if set(whole) <= set(late):
        return None
    return int(row["local_rank"]), ranks


def _excess(ctx: Context, ranks: list[int]) -> dict[int, float]:
    if ctx.program is None:
        return {}
    rc = rank_compute(ctx).filter(pl.col("rank").is_in(ranks))
    return dict(zip(rc["rank"].to_list(), map(ms, rc["excess_ns"].to_list()), strict=True))


def _straggler_finding(ctx: Context, late: list[int]) -> Finding:
    pr = ctx.metrics.per_rank
    share = _last_share(ctx, late)
    lateness = pr.filter(pl.col("rank").is_in(late))["lateness_p50_ns"].fill_null(0.0)
    place = ctx.metrics.placement
    nodes = ctx.nodes_of(late)
    whole = [
        n for n in nodes if set(place.filter(pl.col("node") == n)["rank"].to_list()) <= set(late)
    ]
    ranks = ", ".join(map(str, late))
    label = f"rank{'s' if len(late) > 1 else ''} {ranks}"
    # a whole node late is named as such, with its ranks: the finding's ranks are in it
    where = f"node {', '.join(whole)} ({label})" if whole else label
    starved = starved_hosts(ctx, whole or nodes)
    replay = _not_slow(ctx, late, "straggler", starved=bool(starved))
    wait = _wait_cost(ctx, late)
    excess = _excess(ctx, late)
    cost = replay.saving if replay is not None else wait
    more = (
        f"computes {float(np.median(list(excess.values()))):.2f} ms more per iteration than "
        "the others"
        if excess
        else f"arrives late by {ms(float(lateness.median() or 0.0)):.2f} ms"
    )
    limits = [_starved_note(node, cpu, ctx.thresholds) for node, cpu in starved.items()]
    if limits:
        more += " and communicates slowly: " + "; ".join(limits)
    side = device.sides(ctx, late)  # on device time: its CPU late, or its GPU slow
    if device.sentence(side):
        more += " — " + device.sentence(side)
    return ctx.finding(
        "straggler",
        wait,
        max(share, 0.5 if excess else 0.0),
        f"{where} {more} (last in {share:.0%} of iterations); without it each iteration "
        f"would be {cost:.1%} shorter",
        replay=replay,
        ranks=tuple(late),
        nodes=tuple(whole) if whole else nodes,
        evidence={
            "late_ranks": late,
            "whole_nodes": whole,
            "compute_excess_ms": excess,
            "lateness_p50_ms": dict(zip(late, map(ms, lateness.to_list()), strict=True)),
            "typical_lateness_p50_ms": ms(float(pr["lateness_p50_ns"].median() or 0.0)),
            "last_share": round(share, 4),
            "wait_share_of_iteration": round(wait, 4),
            "iteration_ms": ms(ctx.iteration_ns),
            **device.evidence(side),
            **(
                {
                    "cpu_throttled_share_by_host": {
                        n: c.get("throttled_share") for n, c in starved.items()
                    },
                    "cpu_wait_share_by_host": {
                        n: c.get("job_wait_share") for n, c in starved.items()
                    },
                    "cpu_quota_by_host": {n: c.get("quota_cpus") for n, c in starved.items()},
                }
                if starved
                else {}
            ),
        },
        actions=advice.straggler(list(starved), device.actions(side)),
    )


def _locality_finding(ctx: Context, local_rank: int, ranks: list[int]) -> Finding:
    wait = _wait_cost(ctx, ranks)
    by_local = ctx.metrics.by_local_rank
    this = by_local.filter(pl.col("local_rank") == local_rank)
    others = by_local.filter(pl.col("local_rank") != local_rank)
    nodes = ctx.nodes_of(ranks)
    replay = _not_slow(ctx, ranks, "locality_variance")
    cost = replay.saving if replay is not None else wait
    return ctx.finding(
        "locality_variance",
        wait,
        max(_last_share(ctx, ranks), 0.5 if ctx.program is not None else 0.0),
        f"local rank {local_rank} is slow on {len(nodes)} nodes (ranks "
        f"{', '.join(map(str, ranks))}): a placement pattern, not a bad node; without it each "
        f"iteration would be {cost:.1%} shorter",
        replay=replay,
        ranks=tuple(ranks),
        nodes=nodes,
        evidence={
            "local_rank": local_rank,
            "late_ranks": ranks,
            "compute_excess_ms": _excess(ctx, ranks),
            "lateness_p50_ms": ms(float(this["lateness_p50_ns"].mean() or 0.0)),
            "other_local_ranks_lateness_p50_ms": ms(float(others["lateness_p50_ns"].mean() or 0.0)),
            "last_share": round(_last_share(ctx, ranks), 4),
            "wait_share_of_iteration": round(wait, 4),
        },
        actions=advice.locality_variance(local_rank),
    )


# One-off stalls and recurring jitter ---------------------------------------------------


def stall_actions(ctx: Context) -> np.ndarray | None:
    """Actions whose gap is a one-off stall: at least ``stall_min_share`` of an
    iteration and ten robust spreads beyond the rank's steady gap at that point of the
    step, in few enough steps (``stall_max_steps``) to be events rather than a heavy
    tail. None when there is none (or no replay)."""

    def compute() -> np.ndarray | None:
        prog, th = ctx.program, ctx.thresholds
        if prog is None or ctx.iteration_ns <= 0:
            return None
        excess, spread = cf.excess_gaps(prog)
        big = (excess >= th.stall_min_share * ctx.iteration_ns) & (excess >= 10 * spread)
        steps = np.unique(prog.step[big])
        if len(steps) == 0 or len(steps) > max(2, th.stall_max_steps * len(prog.steps)):
            return None
        return big

    return ctx.memo("stalls", compute)


def stalls(ctx: Context) -> list[Finding]:
    big = stall_actions(ctx)
    prog = ctx.program
    if big is None or prog is None:
        return []
    excess, _ = cf.excess_gaps(prog)
    ranks = sorted({int(r) for r in prog.rank[big]})
    steps = sorted({int(s) for s in prog.step[big]})
    replay = ctx.counterfactual(
        "stall", "without the one-off stalls", lambda p: cf.without_gaps(p, big), cause="stall"
    )
    assert replay is not None
    longest = float(excess[big].max())
    where = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    return [
        ctx.finding(
            "stall",
            0.0,
            1.0,
            f"a one-off stall: {where} stopped for {longest / 1e9:.2f} s in step"
            f"{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))} while every other "
            f"rank waited; it costs {replay.saving:.1%} of the run's iteration time on average",
            replay=replay,
            ranks=tuple(ranks),
            nodes=ctx.nodes_of(ranks),
            evidence={
                "steps": steps,
                "stall_ms": round(longest / 1e6, 3),
                "stalls": int(big.sum()),
                "iteration_ms": ms(ctx.iteration_ns),
            },
            actions=advice.stall(where, steps[0]),
        )
    ]


def _jitter_beyond_stragglers(ctx: Context, change: Change) -> float:
    """What removing the jitter saves once the persistent stragglers compute like the
    others (a share of the measured iteration): a starved rank's compute varies as much
    as it is slow, and that variation goes with it."""
    prog, base = ctx.program, ctx.base
    late = late_ranks(ctx)
    if prog is None or base is None or base.measured_ns <= 0 or not late:
        return float("inf")
    fixed = cf.compute_like_others(prog, late)
    alone = evaluate(prog, base, "stragglers", "stragglers fixed", fixed)
    both = evaluate(prog, base, "both", "stragglers and jitter", cf.combine([fixed, change]))
    return (alone.iteration_ns - both.iteration_ns) / base.measured_ns


def sync_amplification(ctx: Context) -> list[Finding]:
    m, th = ctx.metrics, ctx.thresholds
    if m.per_rank.height < 2 or ctx.iteration_ns <= 0:
        return []
    wait = _wait_cost(ctx, [])
    n = max(len(m.ranks), 1)
    last_ranks = int((m.per_rank["last_share"] >= 1 / (4 * n)).sum())
    spread = last_ranks / n
    max_share = float(m.per_rank["last_share"].max() or 0.0)
    cv = m.iteration.get("cv", 0.0)
    replay = None
    if ctx.program is not None:
        prog, big = ctx.program, stall_actions(ctx)
        change = cf.without_jitter(prog)
        if big is not None and change.gap is not None:  # the one-off stalls are kept
            change = Change(gap=np.where(big, prog.gap, change.gap))
        replay = ctx.counterfactual(
            "jitter", "no compute jitter (recurring)", change, cause="sync_amplification"
        )
        # the one rule: what the replay saves without the jitter, not a gate of its own
        if replay is None or not costs.reported(replay.saving, replay.error, th):
            return []
        beyond = _jitter_beyond_stragglers(ctx, change)
        if beyond < th.sync_wait_share and beyond < replay.saving / 2:
            # the variation is the stragglers' own (fixing them takes most of what
            # removing it saves): their finding's cost, and its replay theirs. A rank
            # late by a little more than the jitter's noise takes a little of it, and
            # leaves it the cause.
            ctx.claim("jitter", "straggler")
            return []
        confidence = confidence_of(replay.saving, th.sync_wait_share)
    else:
        # "takes turns": a rank counts when it was last in at least a quarter of its fair
        # share of iterations, and no rank is last in most of them (that is a straggler)
        if wait < th.sync_wait_share or spread < th.sync_spread or max_share >= 0.5:
            return []
        confidence = confidence_of(spread * wait, th.sync_wait_share)
    cost = replay.saving if replay is not None else wait
    return [
        ctx.finding(
            "sync_amplification",
            wait,
            confidence,
            f"recurring jitter: {last_ranks} of {len(m.ranks)} ranks take turns arriving last "
            f"(iteration CV {cv:.3f}); without the jitter each iteration would be "
            f"{cost:.1%} shorter",
            replay=replay,
            evidence={
                "wait_share_of_iteration": round(wait, 4),
                "iteration_cv": round(cv, 4),
                "ranks_ever_last": last_ranks,
                "max_last_share": round(max_share, 4),
                "skew_p50_ms": ms(float(m.instances["skew_ns"].median() or 0.0)),
            },
            actions=advice.sync_amplification(),
        )
    ]
