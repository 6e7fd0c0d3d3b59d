"""CPU starvation: a host whose job threads wait for a CPU, judged on its own counters.

The host sampler measures, per host, how long the sampled rank's threads waited in the
run queue against how long they ran (``/proc/<pid>/task/*/schedstat``) and how long
the cgroup's CPU limit held them throttled. Either share past its threshold starves
the host, whatever the other hosts show: a one-host job on a shared machine has no
other host to compare with, and its ranks take turns arriving late as the CPU goes to
one or the other, a straggler that changes from rerun to rerun.

Where the sampler measured each rank on its own (every rank of the host registers its
process), a late rank's lateness is weighed against its own main thread's waiting for a
CPU: a rank late because it waited is its host's CPU, a rank late while waiting no more
than the others is late by its own doing, whatever the host's load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from syncpace.analysis.detectors import advice, halves
from syncpace.analysis.detectors.context import Context, confidence_of, ms
from syncpace.analysis.findings import Finding
from syncpace.analysis.replay import Change
from syncpace.analysis.replay import counterfactuals as cf


def host_cpu(ctx: Context, half: int | None = None) -> dict[str, dict[str, Any]]:
    """Per host, its CPU summary (``hostcounters``: waiting and throttled shares, each
    rank measured on its own) over the run's iterations, or over ``half`` of them (0, 1)
    alone.

    The sampler runs for the job's whole life: start-up, phases the trace does not
    hold (a window of it, an export, an evaluation), shutdown. A rank's waiting there
    says nothing of its iterations, and weighed against their compute it would explain
    a straggler by waiting it did elsewhere; so the run is the span of its iterations.
    A host whose series saw less than half of that span keeps its summary over all it
    saw (a sampler slower than the run)."""
    hosts = ctx.metrics.hosts
    if hosts is None:
        return {}

    def compute() -> dict[str, dict[str, Any]]:
        span = halves.window(ctx, half)
        within = hosts.cpu_within(span) if span is not None else {}
        if half is not None:
            return within
        return {n: within.get(n) or (h.get("cpu") or {}) for n, h in hosts.hosts.items()}

    return ctx.memo(f"host_cpu:{half}", compute)


def covered(ctx: Context, nodes: Sequence[str], half: int) -> bool:
    """Whether the host counters measured every host of ``nodes`` over ``half`` of the
    run: its waiting (or its throttling) and, where the run measured its ranks on
    their own, theirs."""
    whole, part = host_cpu(ctx), host_cpu(ctx, half)
    for node in nodes:
        have, had = part.get(node) or {}, whole.get(node) or {}
        for key in ("job_wait_share", "throttled_share", "ranks"):
            if key in had and key not in have:
                return False
    return True


def starved_hosts(
    ctx: Context, nodes: Sequence[str], half: int | None = None
) -> dict[str, dict[str, Any]]:
    """Of ``nodes``, the hosts starved of CPU on their own evidence: their CPU limit
    held the job's ranks throttled for at least ``cpu_throttle_share`` of the sampled
    span, or their sampled rank's threads waited for a CPU at least ``cpu_wait_share``
    of the time they could run; over the run or ``half`` of it."""
    th = ctx.thresholds
    by_host = host_cpu(ctx, half)
    out = {}
    for node in nodes:
        cpu = by_host.get(node) or {}
        wait = cpu.get("job_wait_share") or 0.0
        share = cpu.get("throttled_share") or 0.0
        if share >= th.cpu_throttle_share or wait >= th.cpu_wait_share:
            out[node] = cpu
    return out


def rank_waits(ctx: Context, half: int | None = None) -> dict[int, float]:
    """Each rank measured on its own: the share of the sampled span (of the run or
    ``half`` of it) its main thread waited for a CPU (ns per ns); empty where the
    sampler measured no rank alone. Read once a run: every late rank's judgement asks
    for it."""

    def compute() -> dict[int, float]:
        out: dict[int, float] = {}
        for summary in host_cpu(ctx, half).values():
            for rank, entry in (summary.get("ranks") or {}).items():
                if "main_wait_rate" in entry and str(rank).isdigit():
                    out[int(rank)] = float(entry["main_wait_rate"])
        return out

    return ctx.memo(f"rank_waits:{half}", compute)


def extra_wait_ns(ctx: Context, rank: int, half: int | None = None) -> float | None:
    """How much longer per iteration ``rank``'s main thread waited for a CPU than the
    faster half of the measured ranks' (the median of those at or below the median),
    over the run or ``half`` of it; None where it, or no other rank, was measured on
    its own."""
    waits = rank_waits(ctx, half)
    if rank not in waits or len(waits) < 2:
        return None
    values = sorted(waits.values())
    mid = float(np.median(values))
    base = float(np.median([v for v in values if v <= mid]))
    return (waits[rank] - base) * ctx.iteration_ns


def stands_out(ctx: Context, node: str, others: Sequence[str], half: int | None = None) -> bool:
    """Whether ``node`` is starved beyond the hosts ``others`` (those of the ranks on
    time): its throttled share, or its waiting share, past its threshold and above
    theirs by that threshold again (over the run or ``half`` of it). Hosts starved
    alike cannot explain why one host's ranks are late and the others' are not; with no
    other host, its own evidence does."""
    by_host = host_cpu(ctx, half)
    if not by_host:
        return False
    th = ctx.thresholds

    def shares(name: str) -> tuple[float, float]:
        cpu = by_host.get(name) or {}
        return cpu.get("throttled_share") or 0.0, cpu.get("job_wait_share") or 0.0

    _, wait = shares(node)
    most_wait = max((shares(n)[1] for n in others if n != node), default=0.0)
    return throttled_beyond(ctx, node, others, half) or (
        wait >= th.cpu_wait_share and wait >= most_wait + th.cpu_wait_share
    )


def throttled_beyond(
    ctx: Context, node: str, others: Sequence[str], half: int | None = None
) -> bool:
    """Whether ``node``'s CPU limit held its ranks throttled at least
    ``cpu_throttle_share`` of the time and beyond every host of ``others`` by that share
    again (over the run or ``half`` of it): the kernel's own word that the host's ranks
    wanted more CPU than they were let have, where the others did not."""
    by_host = host_cpu(ctx, half)
    th = ctx.thresholds

    def throttled(name: str) -> float:
        return (by_host.get(name) or {}).get("throttled_share") or 0.0

    most = max((throttled(n) for n in others if n != node), default=0.0)
    share = throttled(node)
    return share >= th.cpu_throttle_share and share >= most + th.cpu_throttle_share


def ranks_stand_out(ctx: Context, node: str, half: int | None = None) -> bool:
    """Whether the ranks of ``node`` measured on their own waited for a CPU, on
    average, beyond the ranks of every other host of the job (their average, host by
    host) by at least ``warning_cost`` of the time (over the run or ``half`` of it):
    waiting that alone could cost the reporting threshold of each iteration, on that
    host and not the others. On a machine whose ranks all wait, the host that waited
    most moves from host to host (measured on healthy drawn jobs: at most 0.04 beyond
    the next host); a host capped below its ranks' needs waits 0.11-0.3 beyond."""
    waits = rank_waits(ctx, half)
    by_host: dict[str, list[float]] = {}
    for rank, host in ctx.metrics.node_of().items():
        if rank in waits:
            by_host.setdefault(str(host), []).append(waits[rank])
    if node not in by_host or len(by_host) < 2:
        return False
    mean = {h: float(np.mean(v)) for h, v in by_host.items()}
    rest = max(v for h, v in mean.items() if h != node)
    return mean[node] - rest >= ctx.thresholds.warning_cost


def note(node: str, cpu: dict[str, Any], th: Any) -> str:
    """The host's starvation in words: its limit when it throttled, else its waiting;
    and its late ranks' own waiting where it explains them (``explained``: rank -> ms
    more per iteration than the faster half of the ranks)."""
    explained = cpu.get("explained") or {}
    own = ", ".join(f"rank {r} {w:.1f} ms" for r, w in sorted(explained.items()))
    own = (
        f"the late ranks' main threads waited for a CPU longer per iteration than the "
        f"others' ({own})"
        if explained
        else ""
    )
    if (cpu.get("throttled_share") or 0.0) >= th.cpu_throttle_share:
        quota = f" ({cpu['quota_cpus']:g} CPU)" if cpu.get("quota_cpus") else ""
        text = (
            f"host {node}'s CPU limit{quota} held its ranks throttled "
            f"{cpu['throttled_share']:.0%} of the time"
        )
    elif (cpu.get("job_wait_share") or 0.0) >= th.cpu_wait_share or not own:
        text = (
            f"host {node}'s ranks waited for a CPU {cpu.get('job_wait_share', 0.0):.0%} of "
            "the time they could run"
        )
    else:
        return f"on host {node} {own}"
    return f"{text}; {own}" if own else text


def ranks_on(ctx: Context, nodes: Sequence[str]) -> list[int]:
    place = ctx.metrics.placement
    return sorted(place.filter(pl.col("node").is_in(list(nodes)))["rank"].to_list())


def peers_fed(ctx: Context, starved: Sequence[str]) -> bool:
    """Whether some host of the job is not starved: only then do the starved ranks'
    transfers have a measure of what the links allow beside them. Where every host
    starves, the run's best transfer was made by starved threads too, and a one-host
    job's every transfer involves every rank: the cost stays the compute's."""
    nodes = set(ctx.metrics.placement["node"].to_list())
    return bool(nodes - set(starved))


def links_allow(ctx: Context, prog: Any, ranks: Sequence[int]) -> Change:
    """The transfers ``ranks`` take part in at what the links allow: the run's best
    for their class (op, size, group), and no faster than the benchmarked rate where
    there is one. The benchmark times one collective alone on rested links; a job's own
    transfers share the links with each other (buckets in flight together) and may
    never reach it, fed or not: on a 100 Mbit/s star a DDP job's healthy phases
    would be 36 % shorter at the benchmark's rate. Starvation comes in bursts (a CPU
    limit throttles a period at a time), so some of the run's transfers were made by
    fed threads: the class's best is what a fed rank's transfer takes."""
    theirs = cf.instances_with(prog, ranks)
    best = cf.transfers_at_best(prog, which=theirs)
    th = ctx.thresholds
    if th.link_gbps <= 0 or best.service is None:
        return best
    rate = cf.transfers_at_rate(prog, th.link_gbps, th.link_alpha_us * 1e3, which=theirs)
    assert rate.service is not None
    return Change(service=np.fmax(best.service, rate.service))


def evidence(starved: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The starved hosts' CPU counters, by host; the late ranks each host's CPU
    explains by their own waiting, with the ms more they waited per iteration."""
    explained = {n: c["explained"] for n, c in starved.items() if c.get("explained")}
    return {
        **({"cpu_extra_wait_ms_by_rank": explained} if explained else {}),
        "cpu_wait_share_by_host": {n: c.get("job_wait_share") for n, c in starved.items()},
        "cpu_throttled_share_by_host": {n: c.get("throttled_share") for n, c in starved.items()},
        "cpu_quota_by_host": {n: c.get("quota_cpus") for n, c in starved.items()},
    }


def fed(ctx: Context, ranks: list[int], removal: Any, links: bool) -> Any:
    """The late starved ranks with the CPU they need: their late arrivals' extra time
    removed (``removal``, a counterfactual maker: each half's extra time, their
    variation kept for the jitter finding). With ``links``, the transfers they drive
    then take what the links allow (the benchmarked rate, else the run's best): a
    starved rank also starves the threads that drive its communication."""
    label = ",".join(map(str, ranks))

    def change(p: Any) -> Change:
        made = removal(p)
        return cf.combine([made, links_allow(ctx, p, ranks)]) if links else made

    return ctx.counterfactual(
        f"cpu_starvation:{label}",
        f"rank{'s' if len(ranks) > 1 else ''} {label} with the CPU they need",
        change,
        cause="cpu_starvation",
    )


def finding(
    ctx: Context,
    starved: dict[str, dict[str, Any]],
    late: Sequence[int],
    by_half: tuple[list[int], list[int]],
    removal: Any,
    apart: Sequence[int] = (),
    on_time: bool = False,
) -> Finding | None:
    """CPU starvation named where it explains the late arrivals (``late``: the starved
    hosts' ranks late in one half only, or all of a host's ranks late), or, ``on_time``,
    the slowed transfers of ranks that arrive on time (``late``: those ranks). The ranks
    ``apart`` (stragglers of their own on those hosts) are left to their finding."""
    th = ctx.thresholds
    ranks = [r for r in ranks_on(ctx, list(starved)) if r not in apart]
    mine_late = sorted(set(late) & set(ranks))
    if not mine_late:
        return None
    # the hosts it explains late ranks of: a starved host whose ranks are on time is no
    # part of this finding (its CPU is noted where a finding of its ranks is made)
    starved = {n: c for n, c in starved.items() if set(ranks_on(ctx, [n])) & set(mine_late)}
    ranks = [r for r in ranks_on(ctx, list(starved)) if r not in apart]
    replay = fed(ctx, mine_late, removal, peers_fed(ctx, list(starved)))
    cost = replay.saving if replay is not None else 0.0
    pr = ctx.metrics.per_rank
    share = float(pr.filter(pl.col("rank").is_in(ranks))["last_share"].sum())
    label = ", ".join(map(str, ranks))
    first, second = ([r for r in h if r in ranks] for h in by_half)
    if on_time:
        turns = "; on time at their collectives, slow inside them: the transfers they drive wait"
    elif first != second:
        turns = (
            f"; the late rank changes: {_names(first)} in the first half of the run, "
            f"{_names(second)} in the second"
        )
    else:
        turns = ""
    notes = "; ".join(note(n, c, th) for n, c in starved.items())
    return ctx.finding(
        "cpu_starvation",
        cost,
        confidence_of(max(_shares(starved)), th.cpu_wait_share) if starved else 0.0,
        f"CPU starvation: {notes} (rank{'s' if len(ranks) > 1 else ''} {label}, last in "
        f"{share:.0%} of iterations{turns}); with the CPU they need each iteration would be "
        f"{cost:.1%} shorter",
        replay=replay,
        ranks=tuple(ranks),
        nodes=tuple(starved),
        evidence={
            "starved_ranks": ranks,
            "late_ranks": [] if on_time else mine_late,
            **({"slowed_transfers_of": mine_late} if on_time else {}),
            "late_ranks_first_half": first,
            "late_ranks_second_half": second,
            "last_share": round(share, 4),
            "iteration_ms": ms(ctx.iteration_ns),
            **evidence(starved),
        },
        actions=advice.cpu_starvation(list(starved)),
    )


def machine_finding(
    ctx: Context,
    late: Sequence[int],
    by_half: tuple[list[int], list[int]],
    removal: Any,
) -> Finding | None:
    """CPU starvation of the machine, not of a host: the job's late ranks wait for a
    CPU, but no host stands out beyond the others in each half of the run (every host
    waits alike, or the starved place moves from host to host). Names no host and no
    rank: a user told "h1 is starved" acts on h1, and the next run names h2. Its cost
    is the same replay as a host's (the late ranks fed), the transfers at what the
    links allow only where some host of the job is not starved; its severity the
    shared rule on that saving."""
    if not late:
        return None
    th = ctx.thresholds
    every = sorted(ctx.metrics.placement["node"].unique().to_list())
    replay = fed(ctx, list(late), removal, peers_fed(ctx, list(starved_hosts(ctx, every))))
    cost = replay.saving if replay is not None else 0.0
    by_host = host_cpu(ctx)
    shares = {
        n: by_host[n]["job_wait_share"] for n in every if "job_wait_share" in (by_host.get(n) or {})
    }
    said = ", ".join(f"{n} {v:.0%}" for n, v in shares.items())
    where = (
        f"the job's ranks wait for a CPU on every host ({said} of the time they could run)"
        if len(shares) == len(every) and all(v >= th.cpu_wait_share for v in shares.values())
        else "the job's late ranks waited for a CPU"
    )
    first, second = (sorted(set(h) & set(late)) for h in by_half)
    hosts_of = {r: ctx.nodes_of([r])[0] for r in late}

    return ctx.finding(
        "cpu_starvation",
        cost,
        confidence_of(max(shares.values(), default=0.0), th.cpu_wait_share),
        f"CPU starvation of the machine, not of one host: {where}; the late ranks were "
        f"{halves.ranks_where(ctx, first)} in the first half of the run, "
        f"{halves.ranks_where(ctx, second)} in the second, and no "
        f"host stands out beyond the others in both halves; with the CPU they need each "
        f"iteration would be {cost:.1%} shorter",
        replay=replay,
        ranks=(),
        nodes=tuple(every),
        evidence={
            "placed": False,
            "late_ranks": sorted(late),
            "late_ranks_first_half": first,
            "late_ranks_second_half": second,
            "late_hosts": {str(r): h for r, h in sorted(hosts_of.items())},
            "cpu_wait_share_by_host": shares,
            "iteration_ms": ms(ctx.iteration_ns),
        },
        actions=advice.cpu_machine(every),
    )


def _names(ranks: list[int]) -> str:
    if not ranks:
        return "none"
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _shares(starved: dict[str, dict[str, Any]]) -> list[float]:
    return [
        max(c.get("job_wait_share") or 0.0, c.get("throttled_share") or 0.0)
        for c in starved.values()
    ]
