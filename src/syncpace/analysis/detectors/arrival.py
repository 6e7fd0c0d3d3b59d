"""Arrival findings: persistent stragglers, locality patterns, one-off stalls, recurring
jitter.

With a replay of the run (``metrics.program``) a rank's own compute per step is the sum
of its gaps between calls: time it ran on its own, not time it waited for others. A
straggler computes persistently more than the fast ranks do; ranks that are merely
late because their previous collective ended late for them (next to a slow link) are
not stragglers (see ``network.slow_link``). Baselines are the median of the faster
half of the ranks, so a pattern that covers half the ranks (one local rank of two on
every node) still stands out. Costs are what the replay saves with the cause removed.

One module of ~900 lines: stragglers, locality patterns, CPU starvation, stalls and
jitter share one account of each rank's lateness and split it between them (each
claims its part and is costed on what the others leave: a straggler's removal keeps
the stalls, the jitter's keeps the starved hosts' turns), so the rules that decide
which cause owns a late step are read together. The CPU and device evidence they
weigh is in :mod:`.cpu` and :mod:`.device`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from syncpace.analysis import costs
from syncpace.analysis.detectors import advice, cpu, device, halves
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
from syncpace.analysis.replay.program import Program
from syncpace.analysis.replay.whatif import evaluate


def rank_compute(ctx: Context, half: int | None = None) -> pl.DataFrame:
    """Per rank: ``excess_ns`` (median over steps of its compute minus the fast half's;
    ``mean_excess_ns`` the mean), ``compute_ns`` (its median compute per step),
    ``above`` (the steps it computed more than the step's median, of ``steps``),
    ``steady_t`` (how many standard errors its mean compute over the other ranks'
    median in the step lies above zero) and the run's ``noise_ns`` (how far
    the fast half's compute strays from its own median, see :func:`fast_noise`); over
    the whole run, or over its first (``half=0``) or second (``half=1``) half of steps."""

    def compute() -> pl.DataFrame:
        prog = ctx.program
        assert prog is not None
        per = (
            pl.DataFrame({"rank": prog.rank, "step": prog.step, "gap": prog.gap})
            .filter(halves.in_half(prog.steps, half))
            .group_by("rank", "step")
            .agg(compute=pl.col("gap").sum())
        )
        per = _others_median(
            per.with_columns(
                base=fast_half(pl.col("compute")).over("step"),
                mid=pl.col("compute").median().over("step"),
            )
        )
        noise = fast_noise(per, "compute", "base", "mid")
        return (
            per.group_by("rank")
            .agg(
                excess_ns=(pl.col("compute") - pl.col("base")).median(),
                mean_excess_ns=(pl.col("compute") - pl.col("base")).mean(),
                compute_ns=pl.col("compute").median(),
                above=(pl.col("compute") > pl.col("mid")).sum(),
                steps=pl.len(),
                steady_t=_t_of(pl.col("compute") - pl.col("others")),
            )
            .with_columns(noise_ns=pl.lit(noise))
            .sort("rank")
        )

    return ctx.memo(f"rank_compute:{half}", compute)


def _others_median(per: pl.DataFrame) -> pl.DataFrame:
    """``per`` (rank, step, compute) with ``others``: the median of the other ranks'
    compute in the same step (with two ranks, the other's). A rank's own value left
    out, a late rank of a few is measured against the ranks it holds up."""
    per = per.sort("step", "compute")
    sizes = per.group_by("step", maintain_order=True).agg(n=pl.len())["n"].to_numpy()
    values = per["compute"].to_numpy().astype(float)
    others = np.full(len(values), np.nan)
    start = 0
    for n in sizes:  # a step's ranks, sorted: leaving out the k-th shifts the rest
        a = values[start : start + n]
        if n >= 2:
            k = np.arange(n)
            m = n - 1

            def at(j: int, k: np.ndarray = k, a: np.ndarray = a) -> np.ndarray:
                return a[np.where(j < k, j, j + 1)]

            others[start : start + n] = at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2
        start += n
    return per.with_columns(others=pl.Series(others)).fill_nan(None)


def _t_of(values: pl.Expr) -> pl.Expr:
    """How many standard errors the mean of ``values`` lies above zero (0 for fewer
    than 3 values or none spread)."""
    n = values.len()
    spread = values.std() / n.sqrt()
    return (
        pl.when((n >= 3) & (spread > 0)).then(values.mean() / spread).otherwise(0.0).fill_null(0.0)
    )


def late_ranks(ctx: Context) -> list[int]:
    """Stragglers: ranks late by their own doing (:func:`late_in`) over the whole run
    and in each of its halves. A rank late in one half only is not persistent: the
    late rank changes (CPU contention, other work on the host), and excluding its node
    would not help. Runs too short to halve (fewer than 4 steps) are judged whole.
    Where each rank's waiting for a CPU is measured, also the ranks late step after
    step by their own doing (:func:`steady_late`), though not by the margin in each
    half (weak, or beside jitter)."""

    def compute() -> list[int]:
        return sorted(set(stable_late(ctx)) | set(steady_late(ctx)))

    return ctx.memo("late_ranks", compute)


def stable_late(ctx: Context) -> list[int]:
    """The stragglers late by the margin over the run and in each of its halves (runs
    too short to halve judged whole)."""
    return halves.in_each_half(ctx, lambda half: late_in(ctx, half))


def typical_mean_excess(ctx: Context, half: int | None = None) -> float:
    """The fast half of the ranks' mean compute excess: what every rank shows under
    jitter alone (over the run or ``half`` of it)."""
    rc = rank_compute(ctx, half)
    return float(rc.select(fast_half(pl.col("mean_excess_ns"))).item() or 0.0)


def cpu_explained(ctx: Context, rank: int, half: int | None = None) -> bool | None:
    """Whether ``rank``'s extra compute is its waiting for a CPU: its main thread
    waited beyond the faster half of the ranks (:func:`cpu.extra_wait_ns`) at least
    ``cpu_explains_share`` of its mean compute excess beyond theirs, over the run or
    ``half`` of it. None where the sampler did not measure the ranks on their own, or
    the rank computes no more."""
    if ctx.program is None:
        return None
    extra_wait = cpu.extra_wait_ns(ctx, rank, half)
    if extra_wait is None:
        return None
    rc = rank_compute(ctx, half).filter(pl.col("rank") == rank)
    if rc.height == 0:
        return None
    extra = float(rc["mean_excess_ns"][0]) - typical_mean_excess(ctx, half)
    if extra <= 0:
        return None
    return extra_wait >= ctx.thresholds.cpu_explains_share * extra


def steady_late(ctx: Context) -> list[int]:
    """Stragglers by the per-step evidence, where every rank's waiting for a CPU is
    measured on its own: a rank whose compute over the other ranks' median in the step
    averages at least ``straggler_steady_t`` standard errors above zero (beyond the jitter every
    rank shows), by ``straggler_min_share`` of the iteration on average beyond the
    fast half of the ranks, and whose own waiting for a CPU does not explain it
    (:func:`cpu_explained`). Without that measure, a rank of a machine shared with
    other work is above the others as steadily (it waits for the CPU more than they
    do): the per-step evidence alone cannot tell them apart."""

    return [r for r in _steady(ctx) if cpu_explained(ctx, r) is False]


def _steady(ctx: Context) -> list[int]:
    """The ranks late step after step (:func:`steady_late`'s first two tests), where
    every rank is measured on its own; whether their waiting explains it aside."""

    def compute() -> list[int]:
        th = ctx.thresholds
        if ctx.program is None or ctx.iteration_ns <= 0 or len(halves.steps(ctx)) < 8:
            return []
        measured = cpu.rank_waits(ctx)
        rc = rank_compute(ctx)
        if rc.height < 2 or not set(rc["rank"].to_list()) <= set(measured):
            return []
        typical = typical_mean_excess(ctx)
        margin = th.straggler_min_share * ctx.iteration_ns
        steady = rc.filter(
            (pl.col("steady_t") >= th.straggler_steady_t)
            & (pl.col("mean_excess_ns") - typical >= margin)
        )
        return sorted(steady["rank"].to_list())

    return ctx.memo("steady", compute)


def late_by_half(ctx: Context) -> tuple[list[int], list[int]]:
    """The ranks late by their own doing in the first and in the second half of the
    run's steps, each half judged alone."""
    return ctx.memo("late_by_half", lambda: (late_in(ctx, 0), late_in(ctx, 1)))


def changing_late(ctx: Context) -> list[int]:
    """Ranks late over the run or in one of its halves but not stragglers: the late
    rank changes; and ranks late step after step whose own waiting for a CPU explains
    it (:func:`steady_late`), which are their host's CPU's."""
    first, second = late_by_half(ctx)
    anywhere = set(late_in(ctx)) | set(first) | set(second) | set(_steady(ctx))
    return sorted(anywhere - set(late_ranks(ctx)))


def late_in(ctx: Context, half: int | None = None) -> list[int]:
    """Ranks that are slow by their own doing, over the run or ``half`` of it: with a
    replay, their compute excess exceeds the fast half of the ranks' by
    ``straggler_min_share`` of the iteration and by ``straggler_factor`` times the
    noise; without one, their median lateness exceeds the fast half's by that share
    and factor."""
    th = ctx.thresholds
    if ctx.iteration_ns <= 0:
        return []
    margin = th.straggler_min_share * ctx.iteration_ns
    if ctx.program is not None:
        rc = rank_compute(ctx, half)
        if rc.height < 2:
            return []
        noise = float(rc["noise_ns"][0])
        # against the fast half of the ranks: under jitter alone every rank's median
        # excess over the per-step fast half is positive, by about the same amount
        typical = float(rc.select(fast_half(pl.col("excess_ns"))).item() or 0.0)
        need = max(margin, th.straggler_factor * noise)
        late = rc.filter(pl.col("excess_ns") - typical >= need)
        return sorted(late["rank"].to_list())
    rs = ctx.metrics.rank_step.drop_nulls("lateness_ns")
    rs = rs.filter(halves.in_half(halves.steps(ctx), half))
    per_rank = rs.group_by("rank").agg(lateness_p50_ns=pl.col("lateness_ns").median())
    if per_rank.height < 2:
        return []
    typical = float(per_rank.select(fast_half(pl.col("lateness_p50_ns"))).item() or 0.0)
    # as with a replay: beyond the run's noise too (how far the fast half's lateness
    # strays from its own, step by step)
    need = max(margin, th.straggler_factor * lateness_noise(rs))
    late = per_rank.filter(
        (pl.col("lateness_p50_ns") - typical >= need)
        & (pl.col("lateness_p50_ns") >= th.straggler_factor * typical)
    )
    return sorted(late["rank"].to_list())


def lateness_noise(rs: pl.DataFrame) -> float:
    """The noise in arrivals without a replay: :func:`fast_noise` of the per (rank,
    step) lateness of ``rs`` against each step's fast half."""
    if rs.height == 0:
        return 0.0
    rs = rs.with_columns(
        base=fast_half(pl.col("lateness_ns")).over("step"),
        mid=pl.col("lateness_ns").median().over("step"),
    )
    return fast_noise(rs, "lateness_ns", "base", "mid")


def _wait_cost(ctx: Context, exclude: list[int]) -> float:
    """Mean idle wait of the other ranks at the end of the iteration, over the iteration;
    where that wait is not measured (``RunMetrics.arrivals_estimated``), their longest
    wait at any collective of the iteration, the median over iterations (a one-off
    stall, which a window holding a pause between phases shows, is the stall detector's):
    the time the late rank holds them up."""
    rs = ctx.metrics.rank_step.filter(~pl.col("rank").is_in(exclude))
    if rs.height == 0 or ctx.iteration_ns <= 0:
        return 0.0
    if ctx.metrics.arrivals_estimated:
        longest = rs["longest_wait_ns"].clip(lower_bound=0)
        return float(longest.median()) / ctx.iteration_ns  # type: ignore[arg-type]
    return float(rs["wait_ns"].mean()) / ctx.iteration_ns  # type: ignore[arg-type]


def _wait_basis(ctx: Context) -> dict[str, str]:
    """The evidence's account of what the wait-based cost measured."""
    why = ctx.metrics.arrivals_estimated
    if not why:
        return {"wait_basis": "the others' wait at the iteration's last collective"}
    return {"wait_basis": f"the others' longest wait in the iteration: {why}"}


def _last_share(ctx: Context, ranks: list[int]) -> float:
    pr = ctx.metrics.per_rank
    return float(pr.filter(pl.col("rank").is_in(ranks))["last_share"].sum())


def _not_slow(ctx: Context, ranks: list[int], cause: str, starved: bool = False) -> Any:
    """These ranks without their persistent extra compute, their variation kept (the
    jitter finding's, see :func:`cf.without_excess`); a one-off stall on them stays (it
    is the stall finding's cost, not theirs). ``starved``: their host is starved of
    CPU, which slows their part in every transfer too: those transfers then take what
    the links allow (:func:`cpu.links_allow`)."""
    label = ",".join(map(str, ranks))

    def change(p: Any) -> Change:
        made = cf.without_excess(p, ranks)
        big = stall_actions(ctx)
        if big is not None and made.gap is not None:
            made = Change(gap=np.where(big, p.gap, made.gap))
        if starved:
            made = cf.combine([made, cpu.links_allow(ctx, p, ranks)])
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


def starved(ctx: Context) -> dict[str, dict[str, Any]]:
    """The job's hosts starved of CPU (:func:`cpu.starved_hosts`), and the hosts of
    late ranks whose own waiting for a CPU explains their lateness
    (:func:`cpu_explained`; ``explained``: rank -> ms waited more per iteration), once
    a run."""

    def compute() -> dict[str, dict[str, Any]]:
        nodes = ctx.metrics.placement["node"].unique().sort().to_list()
        hosts = cpu.starved_hosts(ctx, nodes)
        measured = cpu.host_cpu(ctx)
        for rank in sorted(set(late_ranks(ctx)) | set(changing_late(ctx))):
            if not cpu_explained(ctx, rank):
                continue
            node = ctx.nodes_of([rank])[0]
            entry = dict(hosts.get(node) or measured.get(node) or {})
            waited = cpu.extra_wait_ns(ctx, rank) or 0.0
            entry["explained"] = {**(entry.get("explained") or {}), rank: ms(waited)}
            hosts[node] = entry
        return hosts

    return ctx.memo("starved", compute)


def starvation(ctx: Context) -> Finding | None:
    """The CPU starvation finding, where the job's late arrivals are its (once a run)."""

    def compute() -> Finding | None:
        hosts = starved(ctx)
        if not hosts:
            return None
        late = _explained(ctx, hosts)
        # a host is named only where it stands out in each half of the run; the late
        # ranks of hosts that do not are the machine's, named on no host
        named = {ctx.nodes_of([r])[0] for r in late}
        if not named:
            return _slowed_transfers(ctx, hosts)
        placed = named & set(starved_places(ctx))
        if not placed:
            return cpu.machine_finding(ctx, late, late_by_half(ctx), late_removal(ctx, late))
        late = [r for r in late if ctx.nodes_of([r])[0] in placed]
        apart = sorted(set(late_ranks(ctx)) - set(late))
        removal = late_removal(ctx, late)
        return cpu.finding(ctx, hosts, late, late_by_half(ctx), removal, apart)

    return ctx.memo("starvation", compute)


def _slowed_transfers(ctx: Context, hosts: dict[str, Any]) -> Finding | None:
    """CPU starvation of hosts whose ranks arrive at their collectives on time: a rank
    under a CPU limit spends its quota and waits out the period wherever it is, and in a
    job whose transfers take most of the iteration that is inside them: the collective
    waits for its threads, every rank leaves it late together, and none arrives late.
    Named where the hosts stand out on their own counters in each half of the run
    (:func:`starved_places`) beside a host that does not (the reference for what a fed
    rank's transfer takes), its ranks' stragglers left to their finding; its cost the
    replay of those ranks fed, the transfers they drive at what the links allow."""
    every = set(ctx.metrics.placement["node"].to_list())
    places = [n for n in starved_places(ctx) if n in hosts]
    if not places or set(places) == every:
        return None
    apart = sorted(set(late_ranks(ctx)) | set(changing_late(ctx)))
    ranks = [r for r in cpu.ranks_on(ctx, places) if r not in apart]
    if not ranks:
        return None
    starved = {n: hosts[n] for n in places}
    return cpu.finding(
        ctx, starved, ranks, late_by_half(ctx), late_removal(ctx, ranks), apart, on_time=True
    )


def starved_places(ctx: Context) -> list[str]:
    """The hosts a CPU starvation finding may name: those whose CPU evidence stands
    out over the run and in each of its halves (:func:`halves.in_each_half`): their
    own counters beyond the job's hosts not starved (:func:`cpu.stands_out`; beyond
    every other host where all are; a one-host job by its own counters alone), or
    their ranks' own waiting beyond every other host's ranks'
    (:func:`cpu.ranks_stand_out`). A half the host counters do not cover (a host's
    series seeing less than half of it: a sampler slower than the run's halves) is
    judged as the whole run."""
    every = ctx.metrics.placement["node"].unique().sort().to_list()

    def judge(half: int | None) -> set[str]:
        if half is not None and not cpu.covered(ctx, every, half):
            half = None  # no counters of this half: it says nothing apart from the run
        # beyond the hosts not starved on their own counters (every other host where
        # all are): hosts starved alike beside fed ones stand out together
        fed = [n for n in every if n not in cpu.starved_hosts(ctx, every, half)]
        out = {n for n in every if cpu.stands_out(ctx, n, fed or every, half)}
        return out | {n for n in every if cpu.ranks_stand_out(ctx, n, half)}

    return halves.in_each_half(ctx, judge)


def _explained(ctx: Context, hosts: dict[str, Any]) -> list[int]:
    """The late ranks a starved host's CPU explains: its ranks late in one half only
    (the late rank changes as the CPU goes to one or another), and its stragglers when
    every rank of the host is one. On a job of several hosts either only where the
    host waits for a CPU beyond the hosts of the ranks on time (:func:`cpu.stands_out`;
    beyond the job's other hosts when every host has a late rank): where every host's
    ranks wait alike, the waiting cannot say why these ranks are late and not those
    (a loaded machine's jitter, a rank sleeping in its own code, which waits for no
    CPU). A one-host job has no other host: its own counters say. A straggler whose
    peers on the same starved host are on time is slow by something of its own: a
    straggler, the host's CPU noted."""
    stable, changing = set(late_ranks(ctx)), set(changing_late(ctx))
    place = ctx.metrics.placement
    on_time = place.filter(~pl.col("rank").is_in(sorted(stable | changing)))
    others = on_time["node"].unique().to_list()
    every = place["node"].unique().to_list()
    out: set[int] = set()
    for node in hosts:
        ranks = set(cpu.ranks_on(ctx, [node]))
        beyond = cpu.stands_out(ctx, node, others or every)
        if len(every) == 1 or beyond:
            out |= ranks & changing
        if ranks <= stable and beyond:
            out |= ranks

    # each rank's own waiting, where measured, says it: a straggler that waited no
    # more than the others is slow by its own doing, one that did is its host's CPU
    # (a rank late in one half only is left to its host's counters: over the span,
    # the half it waited in is diluted by the half it did not)
    # -- unless its host's CPU limit throttled it beyond the other hosts (in the halves
    # it was late in), where the host's own counters already explained it: the kernel
    # says its ranks were held off the CPU, and the main thread's sampled waiting is only
    # a measure of that (a one-host job has no other host to be throttled beyond)
    def judged(rank: int, half: int | None = None) -> bool | None:
        said = cpu_explained(ctx, rank, half)
        node = ctx.nodes_of([rank])[0]
        if said is False and rank in out and len(every) > 1:
            return cpu.throttled_beyond(ctx, node, others or every, half)
        return said

    for rank in stable:
        said = judged(rank)
        if said:
            out.add(rank)
        elif said is False:
            out.discard(rank)
    # a rank late in one half only, judged in the halves it was late in (over the run,
    # the half it waited in is diluted by the half it did not): its waiting explains it
    # in one, or, measured, in none (a rank sleeping in its own code waits for no CPU)
    by_half = late_by_half(ctx)
    for rank in changing - stable:
        said = [judged(rank, h) for h in (0, 1) if rank in by_half[h]]
        if any(said):
            out.add(rank)
        elif said and all(x is False for x in said):
            out.discard(rank)
    return sorted(out)


def _taken(ctx: Context) -> set[int]:
    """The ranks the starvation finding speaks for."""
    hungry = starvation(ctx)
    if hungry is None:
        return set()
    # the machine's finding names no rank but speaks for the late ranks it explains
    return set(hungry.ranks) | set(hungry.evidence.get("late_ranks") or ())


def stragglers_and_locality(ctx: Context) -> list[Finding]:
    findings = []
    hungry = starvation(ctx)
    taken = _taken(ctx)
    if hungry is not None:
        findings.append(hungry)
    groups = [[r for r in g if r not in taken] for g in levels(ctx, late_ranks(ctx))]
    for late in (g for g in groups if g):
        pattern = _locality_pattern(ctx, late)
        if pattern:
            local_rank, ranks = pattern
            findings.append(_locality_finding(ctx, local_rank, ranks))
            late = [r for r in late if r not in ranks]
        if late:
            findings.append(_straggler_finding(ctx, late))
    changing = _changing(ctx)
    if changing is not None:
        findings.append(changing)
    return findings


def _changing(ctx: Context) -> Finding | None:
    """The finding of ranks late in part of the run only (not on a starved host), where
    it costs at least ``warning_cost``: below that, one half's late rank is the noise of
    judging half a run (once a run)."""

    def compute() -> Finding | None:
        taken = _taken(ctx)
        ranks = [r for r in changing_late(ctx) if r not in taken]
        if not ranks or ctx.program is None:
            return None
        found = _changing_finding(ctx, ranks)
        return found if found.cost >= ctx.thresholds.warning_cost else None

    return ctx.memo("changing", compute)


def _half_steps(ctx: Context) -> tuple[list[int], list[int]]:
    ordered = halves.steps(ctx).tolist()
    return ordered[: len(ordered) // 2], ordered[len(ordered) // 2 :]


def late_removal(ctx: Context, ranks: list[int]) -> Any:
    """A counterfactual maker: ``ranks`` without the extra time of the halves they were
    late in (each half's medians over that half, their variation kept), over the whole
    run for those late in neither half alone or step after step; those whose own
    waiting for a CPU explains their lateness without the time they waited beyond the
    other ranks (:func:`cf.without_wait`); one-off stalls kept."""
    # a rank its own waiting for a CPU explains is fed: without the time it waited
    # beyond the others (its own variation stays); one late step after step, its
    # whole run
    fed = [r for r in ranks if cpu_explained(ctx, r)]
    waited = {r: cpu.extra_wait_ns(ctx, r) or 0.0 for r in fed}
    apart = set(_steady(ctx)) | set(fed)
    first, second = (sorted(set(h) & set(ranks) - apart) for h in late_by_half(ctx))
    steps = _half_steps(ctx)

    def change(p: Any) -> Change:
        both = zip((first, second), steps, strict=True)
        parts = [cf.without_excess(p, late, s) for late, s in both if late]
        if fed:
            parts.append(cf.without_wait(p, waited))
        rest = [r for r in ranks if r not in first and r not in second and r not in fed]
        if rest:  # late over the run, in neither half by the margin
            parts.append(cf.without_excess(p, rest))
        gap = np.minimum.reduce([c.gap for c in parts if c.gap is not None])
        big = stall_actions(ctx)
        return Change(gap=np.where(big, p.gap, gap) if big is not None else gap)

    return change


def _changing_finding(ctx: Context, ranks: list[int]) -> Finding:
    """Ranks late in part of the run only: no straggler is named (none is persistent);
    the cost is what each half's late ranks cost in that half, their variation kept."""
    first, second = (sorted(set(h) & set(ranks)) for h in late_by_half(ctx))
    change = late_removal(ctx, ranks)
    label = ",".join(map(str, ranks))
    replay = ctx.counterfactual(
        f"straggler:changing:{label}",
        "each half's late ranks computing like the others",
        change,
        cause="straggler",
    )
    cost = replay.saving if replay is not None else 0.0

    def named(late: list[int]) -> str:
        return f"rank{'s' if len(late) > 1 else ''} {', '.join(map(str, late))}" if late else "none"

    # late in each half judged alone, yet not over the whole run: the same ranks
    if first == second and first:
        pattern = f"{named(first)} late in each half of the run judged alone, not over all of it"
    else:
        pattern = (
            f"the late rank changes: {named(first)} in the first half of the run, "
            f"{named(second)} in the second"
        )
    return ctx.finding(
        "straggler",
        _wait_cost(ctx, ranks),
        0.5,
        f"{pattern} — no persistent straggler; without their extra time "
        f"each iteration would be {cost:.1%} shorter",
        replay=replay,
        evidence={
            "late_ranks_first_half": first,
            "late_ranks_second_half": second,
            "stable": False,
            "iteration_ms": ms(ctx.iteration_ns),
        },
        actions=advice.changing_late(),
    )


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
    # its transfers are slow by its host's CPU only where that host is starved beyond
    # the hosts of the ranks on time (a machine starved alike slows every rank's)
    others = place.filter(~pl.col("rank").is_in(late))["node"].unique().to_list()
    starved = cpu.starved_hosts(ctx, whole or nodes)
    explaining = [n for n in starved if _starvation_explains(ctx, late, n, others)]
    standing = [n for n in explaining if cpu.stands_out(ctx, n, others)]
    links = bool(standing) and cpu.peers_fed(ctx, standing)
    replay = _not_slow(ctx, late, "straggler", starved=links)
    wait = _wait_cost(ctx, late)
    excess = _excess(ctx, late)
    cost = replay.saving if replay is not None else wait
    more = (
        f"computes {float(np.median(list(excess.values()))):.2f} ms more per iteration than "
        "the others"
        if excess
        else f"arrives late by {ms(float(lateness.median() or 0.0)):.2f} ms"
    )
    limits = [cpu.note(node, c, ctx.thresholds) for node, c in starved.items()]
    if limits and explaining:  # its transfers are costed too only where links have a measure
        more += " and communicates slowly: " if links else ", on a host starved of CPU: "
        more += "; ".join(limits)
    elif limits:
        more += (
            ", on a host starved of CPU alike for ranks on time, which does not explain it: "
            + "; ".join(limits)
        )
    side = device.sides(ctx, late)  # on device time: its CPU late, or its GPU slow
    if device.sentence(side):
        more += " — " + device.sentence(side)
    stable = set(late) <= set(stable_late(ctx))
    steady = {} if stable else _steady_evidence(ctx, late)
    return ctx.finding(
        "straggler",
        wait,
        max(share, 0.5 if excess else 0.0),
        f"{where} {more} (last in {share:.0%} of iterations, {_persistence(steady)}"
        f"); without its extra time each iteration would be {cost:.1%} shorter",
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
            **_wait_basis(ctx),
            "iteration_ms": ms(ctx.iteration_ns),
            "late_ranks_first_half": late_by_half(ctx)[0],
            "late_ranks_second_half": late_by_half(ctx)[1],
            "stable": stable,
            **steady,
            **device.evidence(side),
            **(cpu.evidence(starved) if starved else {}),
        },
        actions=advice.straggler(explaining, device.actions(side)),
    )


def _starvation_explains(ctx: Context, late: list[int], node: str, others: Sequence[str]) -> bool:
    """Whether starved host ``node`` can explain why ``late`` are late. Against other
    hosts with ranks on time (``others``: their hosts), only when it is starved beyond
    them (:func:`cpu.stands_out`). Where every rank on time shares it, it starves those
    alike: only a late rank's own waiting for a CPU explains it (:func:`cpu_explained`)."""
    if any(n != node for n in others):
        return cpu.stands_out(ctx, node, others)
    return any(cpu_explained(ctx, r) for r in set(late) & set(cpu.ranks_on(ctx, [node])))


def _steps_above(ctx: Context, ranks: list[int]) -> dict[int, list[int]]:
    """Per rank: the steps it computed more than the step's median, and the steps."""
    rc = rank_compute(ctx).filter(pl.col("rank").is_in(ranks))
    return {
        int(r): [int(a), int(n)]
        for r, a, n in zip(rc["rank"], rc["above"], rc["steps"], strict=True)
    }


def _steady_t(ctx: Context, ranks: list[int]) -> dict[int, float]:
    rc = rank_compute(ctx).filter(pl.col("rank").is_in(ranks))
    return {int(r): round(float(t), 2) for r, t in zip(rc["rank"], rc["steady_t"], strict=True)}


def _waited(ctx: Context, ranks: list[int]) -> dict[int, float]:
    """Per rank: how much longer per iteration (ms) its main thread waited for a CPU
    than the faster half of the ranks'."""
    return {r: ms(cpu.extra_wait_ns(ctx, r) or 0.0) for r in ranks}


def _steady_evidence(ctx: Context, late: list[int]) -> dict[str, Any]:
    return {
        "steps_above_median": _steps_above(ctx, late),
        "steady_t": _steady_t(ctx, late),
        "cpu_extra_wait_ms": _waited(ctx, late),
    }


def _persistence(steady: dict[str, Any]) -> str:
    """How the straggler was seen: late in both halves (no ``steady`` evidence), or
    step after step with its main thread waiting for a CPU no longer than its
    compute's excess explains (:func:`_steady_evidence`)."""
    if not steady:
        return "late in both halves of the run"
    counts = ", ".join(f"{a} of {n}" for a, n in steady["steps_above_median"].values())
    ts = ", ".join(f"{v:.1f}" for v in steady["steady_t"].values())
    return (
        f"computing more than the step's median in {counts} steps, {ts} standard errors "
        "beyond the others' jitter; its main thread's waiting for a CPU does not explain it"
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
    iteration (or, in a run of few steps, the ``warning_cost`` share of the run's time
    that removing it would then save) and ten robust spreads beyond the rank's steady
    gap at that point of the step, in few enough steps (``stall_max_steps``) to be
    events rather than a heavy tail, and not the tail of the run's recurring jitter
    (:func:`_jitter_tail`). None when there is none (or no replay)."""

    def compute() -> np.ndarray | None:
        prog, th = ctx.program, ctx.thresholds
        if prog is None or ctx.iteration_ns <= 0:
            return None
        excess, spread = cf.excess_gaps(prog)
        # one step's gap of warning_cost x steps iterations saves warning_cost of the
        # run: below a whole iteration on a run of fewer than 20 steps, and the gate
        # must not hide what the replay would report
        share = min(th.stall_min_share, th.warning_cost * len(prog.steps))
        big = (excess >= share * ctx.iteration_ns) & (excess >= 10 * spread)
        big |= _recurring(ctx, excess, spread)
        steps = np.unique(prog.step[big])
        if len(steps) == 0:
            return None
        if len(steps) > max(2, th.stall_max_steps * len(prog.steps)):
            # too many to be events: a heavy tail, but for steps no tail reaches
            apart, _ = _standing_apart(prog, big, excess, th.stall_tail_factor)
            big = big & np.isin(prog.step, apart)
            if not big.any():
                return None
        big = big & ~_jitter_tail(ctx, big, excess)
        return big if big.any() else None

    return ctx.memo("stalls", compute)


def _recurring(ctx: Context, excess: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """Gaps shorter than a one-off stall's bar that are events all the same: in at
    least three steps, ten robust spreads and ``warning_cost`` of an iteration beyond
    their rank's steady gap, standing apart from every other gap as a group (by the
    k-th root of ``stall_tail_factor`` for k steps: :func:`_standing_apart`), all on one
    rank or on every rank at once (a checkpoint or log flush every few steps, each
    shorter than an iteration).

    The spread is of the rank's steady steps there, those under the ``warning_cost``
    bar: a pause every third step is a third of the rank's steps, and over all of them
    the median absolute deviation is near the three-quarter point of the normal steps'
    (3.6 ms where the same rank's steps spread 1.0 ms without the pauses, whose 27 ms
    then fell under ten spreads)."""
    prog, th = ctx.program, ctx.thresholds
    assert prog is not None
    bar = excess >= th.warning_cost * ctx.iteration_ns
    spread = np.minimum(spread, cf.spread_over(prog, excess, ~bar))
    long = bar & (excess >= 10 * spread)
    none = np.zeros(len(excess), dtype=bool)
    if len(np.unique(prog.step[long])) < 3:
        return none
    apart, _ = _standing_apart(prog, long, excess, th.stall_tail_factor)
    return long & np.isin(prog.step, apart) if len(apart) >= 3 else none


def _jitter_tail(ctx: Context, big: np.ndarray, excess: np.ndarray) -> np.ndarray:
    """Which of the long gaps ``big`` are the tail of jitter that recurs on every rank
    rather than one-off stalls. Heavy-tailed jitter (a loaded host, Lomax-like extra
    compute) now and then draws a step several iterations long; kept apart as a stall,
    its saving is one step's over the run and its error the other steps' variation, so
    neither the stall nor the jitter without it cleared the reporting threshold, and a
    job 22 % slower for its jitter read as healthy. Those within ``stall_tail_factor``
    times the longest excess of the other gaps are the tail where the recurring
    variation, judged over the steps without a long gap, is reported on its own
    (``costs.reported``); longer ones reach beyond any tail. The rest are one-off
    stalls only where removing them is reported too: else the other steps vary as much,
    and every long gap is the tail."""
    prog, base, th = ctx.program, ctx.base, ctx.thresholds
    none = np.zeros(len(big), dtype=bool)
    if prog is None or base is None or base.measured_ns <= 0:
        return none
    rest = float(excess[~big].max(initial=0.0))
    near = big & (excess < th.stall_tail_factor * rest)
    near |= _tail_draws(prog, big, excess, th.stall_tail_factor)
    calm = cf.without_jitter(prog).gap
    tail = none
    if near.any() and calm is not None:
        # over the steps without a long gap: kept in, they would be its error
        other = ~np.isin(prog.steps, prog.step[big])
        recurring = evaluate(prog, base, "jitter", "", Change(gap=calm), within=other)
        tail = near if costs.reported(recurring.saving, recurring.error, th) else none
    left = big & ~tail
    if left.any():
        alone = evaluate(prog, base, "stall", "", cf.without_gaps(prog, left))
        if not costs.reported(alone.saving, alone.error, th):
            return big
    return tail


def _standing_apart(
    prog: Program, big: np.ndarray, excess: np.ndarray, factor: float
) -> tuple[list[int], list[int]]:
    """The steps holding long gaps ``big``, longest first, split in two: the events no
    tail reaches, however much the other steps vary, and the rest. Events: each step
    whose longest gap stands ``factor`` times beyond the next step's; and below those,
    all on one rank in two steps or more, or on every rank at once in each step, the
    largest group of k steps standing the k-th root of ``factor`` beyond the next gap,
    the gaps outside ``big`` the floor below them (a pause every few steps: a
    checkpoint, a log flush). A tail falls on whichever rank draws it, and the chance
    its k longest stand f beyond the next is f to the power of minus k times its shape:
    a group at the k-th root is as unlikely as one step at ``factor``, before the
    chance that all k fall on one rank."""
    steps = np.unique(prog.step[big])
    longest = {int(s): float(excess[big & (prog.step == s)].max()) for s in steps}
    order = sorted(longest, key=longest.__getitem__, reverse=True)
    k = 0
    while k + 1 < len(order) and longest[order[k]] >= factor * longest[order[k + 1]]:
        k += 1
    values = [longest[s] for s in order] + [float(excess[~big].max(initial=0.0))]
    world = len(np.unique(prog.rank))
    for end in range(len(order), k, -1):  # the largest group below them that stands apart
        size = end - k
        # the chance a tail's ``size`` longest stand f beyond the next is f^(-size·shape):
        # a group stands apart at the factor's size-th root, as likely as one step at it
        if values[end - 1] < factor ** (1 / size) * values[end]:
            continue
        top = order[k:end]  # below the steps standing apart one by one
        group = big & np.isin(prog.step, top)
        at_once = all(len(np.unique(prog.rank[group & (prog.step == s)])) == world for s in top)
        # one rank's: a group of two steps or more (a single step on one rank is what
        # any tail draws); every rank at once: a single step is already a coincidence
        one_rank = size >= 2 and len(np.unique(prog.rank[group])) == 1
        if one_rank or at_once:
            k = end
            break
    return order[:k], order[k:]


def _tail_draws(prog: Program, big: np.ndarray, excess: np.ndarray, factor: float) -> np.ndarray:
    """Which of the long gaps ``big`` are draws of one heavy tail rather than events:
    those of the steps not standing apart (:func:`_standing_apart`), when they fall on
    several ranks in several steps. A stall stops one rank, or every rank at one step;
    the tail of a loaded host's jitter falls on whichever rank and step drew it, and its
    longest draws are far more alike than either is to the bulk of the steps (the ratio
    of a Pareto tail's two longest draws is itself Pareto: beyond 5 in under 8 % of
    samples even at shape 1.6)."""
    _, rest = _standing_apart(prog, big, excess, factor)
    draws = big & np.isin(prog.step, rest)
    if len(rest) < 2 or len(np.unique(prog.rank[draws])) < 2:
        return np.zeros(len(big), dtype=bool)
    return draws


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
    at_once = len(ranks) == len(np.unique(prog.rank)) > 1
    where = (
        "every rank"
        if at_once
        else f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    )
    every = _period(steps)
    what = (
        f"a one-off stall: {where} stopped for {longest / 1e9:.2f} s in step {steps[0]}"
        if len(steps) == 1
        else f"stalls: {where} stopped for up to {longest / 1e9:.2f} s in steps "
        f"{', '.join(map(str, steps))}" + (f" (every {every} steps)" if every else "")
    )
    waited = " at once" if at_once else " while every other rank waited"
    return [
        ctx.finding(
            "stall",
            0.0,
            1.0,
            f"{what}{waited}; it costs {replay.saving:.1%} of the run's iteration time on average",
            replay=replay,
            ranks=tuple(ranks),
            nodes=ctx.nodes_of(ranks),
            evidence={
                "steps": steps,
                "stall_ms": round(longest / 1e6, 3),
                "stalls": int(big.sum()),
                "every_steps": every,
                "iteration_ms": ms(ctx.iteration_ns),
            },
            actions=advice.stall(where, steps, every, at_once),
        )
    ]


def _period(steps: list[int]) -> int | None:
    """The stalls' period in steps, where at least three came at one regular interval
    (a checkpoint, an evaluation or a log flush every so many steps)."""
    gaps = set(np.diff(steps).tolist())
    return int(gaps.pop()) if len(steps) >= 3 and len(gaps) == 1 else None


def _jitter_beyond_turns(ctx: Context, change: Change) -> float:
    """What removing the jitter saves once the ranks of hosts starved of CPU have the
    CPU they need and the ranks late in one half only are not late (a share of the
    measured iteration): that variation is their findings' cost. A straggler's cost is
    its persistent extra time only (:func:`_not_slow`), so its jitter stays here and
    nothing is counted twice."""
    prog, base = ctx.program, ctx.base
    if prog is None or base is None or base.measured_ns <= 0:
        return float("inf")
    fixes = [
        ctx.replays[f.evidence["counterfactual"]["name"]][1]
        for f in (starvation(ctx), _changing(ctx))
        if f is not None and f.evidence.get("counterfactual", {}).get("name") in ctx.replays
    ]
    if not fixes:
        return float("inf")
    fixed = cf.combine(fixes)
    alone = evaluate(prog, base, "turns", "their findings' causes removed", fixed)
    both = evaluate(prog, base, "both", "and no jitter", cf.combine([fixed, change]))
    return (alone.iteration_ns - both.iteration_ns) / base.measured_ns


def who_is_last(per_rank: pl.DataFrame) -> str:
    """Who arrives last, in words true to the shares: one rank last in most iterations
    is named with its share ("rank 1 arrives last in 100% of iterations"); turns are
    said only when no rank is last in most of them."""
    n = max(per_rank.height, 1)
    shares = per_rank["last_share"]
    top = int(shares.arg_max() or 0)
    most = float(shares.max() or 0.0)
    turns = int((shares >= 1 / (4 * n)).sum())
    if most >= 0.5 or turns <= 1:
        rank = int(per_rank["rank"][top])
        return f"rank {rank} arrives last in {most:.0%} of iterations"
    return f"{turns} of {n} ranks take turns arriving last (none in most iterations)"


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
        beyond = _jitter_beyond_turns(ctx, change)
        if beyond < th.sync_wait_share and beyond < replay.saving / 2:
            # the variation is the starved ranks' or the late ranks' of one half
            # (removing it takes most of what removing the jitter saves): their cost,
            # and the jitter's replay theirs
            ctx.claim("jitter", "cpu_starvation" if starvation(ctx) else "straggler")
            return []
        confidence = confidence_of(replay.saving, th.sync_wait_share)
    else:
        # "takes turns": a rank counts when it was last in at least a quarter of its fair
        # share of iterations, and no rank is last in most of them (that is a straggler)
        if wait < th.sync_wait_share or spread < th.sync_spread or max_share >= 0.5:
            return []
        if starvation(ctx) is not None:  # the starved host's ranks take the turns
            return []
        confidence = confidence_of(spread * wait, th.sync_wait_share)
    cost = replay.saving if replay is not None else wait
    return [
        ctx.finding(
            "sync_amplification",
            wait,
            confidence,
            f"recurring jitter: {who_is_last(m.per_rank)} (iteration times vary by "
            f"{cv:.1%} around their mean); without the jitter each iteration would be "
            f"{cost:.1%} shorter",
            replay=replay,
            evidence={
                "wait_share_of_iteration": round(wait, 4),
                "iteration_cv": round(cv, 4),
                "ranks_ever_last": last_ranks,
                "max_last_share": round(max_share, 4),
                "skew_p50_ms": ms(float(m.instances["skew_ns"].median() or 0.0)),
                "late_ranks_first_half": late_by_half(ctx)[0],
                "late_ranks_second_half": late_by_half(ctx)[1],
            },
            actions=advice.sync_amplification(),
        )
    ]
