"""Network findings: contention on the fabric, slow links and bandwidth-bound collectives.

One module of ~730 lines: the three judge the same cross-node transfers (their lags
against the fast half, the link counters, the share that is not the job's) and each
is costed against what the others claim, so the rules that decide which owns a slow
transfer are read together. Latency-bound calls are in :mod:`.latency`, traffic that
is not the job's in :mod:`.foreign`, nominal link rates in :mod:`.nominal`, the slow
link no rank lags behind (named from the counters alone) in :mod:`.counted`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from syncpace.analysis import costs
from syncpace.analysis.detectors import advice, counted, cpu, fabricwide, foreign, halves, nominal
from syncpace.analysis.detectors.arrival import fast_half, fast_noise
from syncpace.analysis.detectors.context import Context, ms
from syncpace.analysis.detectors.overlap import overlap_fix
from syncpace.analysis.detectors.traffic import (
    contended_hosts,
    foreign_traffic,
    link_source,
    link_traffic,
    nic_senders,
    own_traffic_only,
)
from syncpace.analysis.findings import Finding
from syncpace.analysis.limits import rate_words
from syncpace.analysis.replay import counterfactuals as cf
from syncpace.analysis.replay.program import JOIN, WAIT
from syncpace.analysis.replay.whatif import Outcome


def cross_node(ctx: Context) -> pl.Expr:
    """Whether an instance's group spans nodes (from the metadata's ``groups``)."""
    spans = ctx.metrics.group_nodes
    world_nodes = ctx.metrics.placement["node"].n_unique()
    return pl.col("group").replace_strict(
        {g: n > 1 for g, n in spans.items()}, default=world_nodes > 1, return_dtype=pl.Boolean
    )


def has_cross_node_group(ctx: Context) -> bool:
    """A fabric verdict needs traffic between nodes: a group that spans two or more."""
    spans = ctx.metrics.group_nodes
    return any(n > 1 for n in spans.values())


def _sized(ctx: Context, least_bytes: int | None = None) -> pl.DataFrame:
    """Instances with a trusted bandwidth at or above the latency knee (or
    ``least_bytes``), each with
    ``cross_node`` and its inflation: its service time per collective in service beside
    it (two buckets sharing a link each take twice as long) over the run's own best
    (5th percentile) for the same op, group size, size class (power of two) and
    locality (``inflation_own``: contention that comes and goes), and over the time at
    ``link_gbps`` when that is given (``inflation_link``: slowness that lasts the whole
    run inflates the run's own best too). ``inflation`` is the larger of the two."""
    inst = ctx.metrics.instances
    big = inst.with_row_index("_id").filter(
        pl.col("complete"),
        pl.col("bytes")
        >= (ctx.thresholds.latency_knee_bytes if least_bytes is None else least_bytes),
        pl.col("busbw_gbps").is_not_null(),
    )
    big = big.with_columns(
        cross_node=cross_node(ctx),
        size_class=pl.col("bytes").log(2).floor().cast(pl.Int32),
        alone_ns=pl.col("service_ns") / pl.col("concurrent"),
    )
    best = pl.col("alone_ns").quantile(0.05, "lower").over("op", "n", "size_class", "cross_node")
    big = big.with_columns(best_ns=best).with_columns(
        inflation_own=pl.col("alone_ns") / pl.col("best_ns")
    )
    if ctx.thresholds.link_gbps > 0:
        # busbw x concurrent is the rate this collective's bytes moved at when alone
        at_link = pl.col("alone_ns") * pl.col("busbw_gbps") * pl.col("concurrent")
        big = big.with_columns(link_ns=at_link / ctx.thresholds.link_gbps).with_columns(
            inflation_link=pl.col("alone_ns") / pl.col("link_ns"),
            best_ns=pl.min_horizontal("best_ns", "link_ns"),
        )
    else:
        big = big.with_columns(inflation_link=pl.lit(None, pl.Float64))
    return big.with_columns(inflation=pl.col("alone_ns") / pl.col("best_ns"))


def _link_change(ctx: Context, which: np.ndarray | None) -> Any:
    th = ctx.thresholds
    if th.link_gbps > 0:
        return lambda p: cf.transfers_at_rate(p, th.link_gbps, th.link_alpha_us * 1e3, which)
    return lambda p: cf.transfers_at_best(p, which)


def _cross_ids(ctx: Context) -> np.ndarray:
    inst = ctx.metrics.instances
    return inst.select(cross_node(ctx)).to_series().to_numpy()


def transfer_lags(ctx: Context, half: int | None = None) -> pl.DataFrame:
    """Per rank: ``lag_ns``, the median over cross-node collectives of how long after
    the fast half of their members it saw them end (ring positions next to a slow link
    end last), and the run's ``noise_ns``; over the run or ``half`` of its steps.
    Empty without a replay."""

    def compute() -> pl.DataFrame:
        prog = ctx.program
        empty = pl.DataFrame(
            schema={"rank": pl.Int64, "lag_ns": pl.Float64, "noise_ns": pl.Float64}
        )
        if prog is None:
            return empty
        seen = ((prog.kind == WAIT) | (prog.kind == JOIN)) & (prog.inst >= 0)
        cross = _cross_ids(ctx)
        seen &= cross[np.where(prog.inst >= 0, prog.inst, 0)]
        if not seen.any():
            return empty
        frame = (
            pl.DataFrame(
                {
                    "rank": prog.rank[seen],
                    "inst": prog.inst[seen],
                    "delta": prog.delta[seen],
                    "step": prog.step[seen],
                }
            )
            .filter(halves.in_half(prog.steps, half))
            .unique(["rank", "inst"])
        )
        if frame.height == 0:
            return empty
        frame = frame.with_columns(
            late=pl.col("delta") - fast_half(pl.col("delta")).over("inst"),
            mid=pl.col("delta").median().over("inst"),
        )
        frame = frame.with_columns(base=fast_half(pl.col("delta")).over("inst"))
        noise = fast_noise(frame, "delta", "base", "mid")
        need = max(ctx.thresholds.lag_min_share * ctx.iteration_ns, 3 * noise)
        return (
            frame.group_by("rank")
            .agg(lag_ns=pl.col("late").median(), late_share=(pl.col("late") >= need / 2).mean())
            .with_columns(noise_ns=pl.lit(noise))
            .sort("rank")
        )

    return ctx.memo(f"transfer_lags:{half}", compute)


#: A rank sits next to a slow link when its collectives end late in this share of them.
PERSISTENT = 0.8
#: ... and next to a second slow link, once one is found, in this share.
SECOND_LINK = 0.5


def lagging_ranks(ctx: Context, half: int | None = None) -> list[int]:
    """Ranks whose cross-node collectives end later than the others' by
    ``lag_min_share`` of the iteration and three times the run's noise (the median of
    their lags), persistently (by half that in 80 % of them): a slow link next to them.
    Contention that comes and goes is not this.

    Once a slow link is found, a rank lagging as much in most (not 80 %) of the
    collectives sits next to a second one: with two slow links in a ring, each
    collective ends at the slower of the two paths, so the second link's end is last
    in fewer of them (measured: both leaf uplinks of a leaf-spine at a quarter of the
    hosts' rate, 100 % and 74 %). Without the first, such a rank is contention's.
    Over the run, or ``half`` of it.

    None on a job of two hosts: every cross-node transfer there crosses both host
    links, so a slow one slows each hop of the ring alike, and which ranks end last is
    the ring's shape (the ranks its cross-host hops reach), not a link's. Measured on
    drawn jobs of 4 ranks on 2 hosts, healthy links: ranks 1 and 3 lagged, one per
    host, and a slow link was named at one host or the other from phase to phase
    (aligning their ends saving 7-28 %). There only the counters can say which host
    link is slower (:mod:`.counted`)."""
    if ctx.metrics.placement["node"].n_unique() == 2:
        return []
    lags = transfer_lags(ctx, half)
    if lags.height < 2 or ctx.iteration_ns <= 0:
        return []
    noise = float(lags["noise_ns"][0])
    need = max(ctx.thresholds.lag_min_share * ctx.iteration_ns, 3 * noise)
    lagging = lags.filter(pl.col("lag_ns") >= need)
    if not (lagging["late_share"] >= PERSISTENT).any():
        return []
    ranks = lagging.filter(pl.col("late_share") >= SECOND_LINK)["rank"].to_list()
    return sorted(ranks) if len(ranks) < lags.height else []


def _judged(ctx: Context, beside: foreign.Beside | None) -> pl.DataFrame:
    """The transfers the finding's figures are of: those at or above the knee, or,
    where fewer than 8 of them cross nodes and foreign traffic is found beside the
    job's, every size (a job of calls below the knee on a slow fabric)."""
    sized = _sized(ctx)
    if beside is not None and sized.filter(pl.col("cross_node")).height < 8:
        return _sized(ctx, 0)
    return sized


def fabric_contention(ctx: Context) -> list[Finding]:
    th = ctx.thresholds
    if ctx.iteration_ns <= 0 or not has_cross_node_group(ctx):
        return []  # loopback on a busy CPU is no fabric
    # traffic that is not the job's on the links it uses, interval by interval, with
    # its transfers slower there: contention however long it lasts (all run long, the
    # run's best is no baseline and the inflation below cannot see it)
    beside = foreign_contention(ctx)
    sized = _judged(ctx, beside)
    suspect = sized.filter(pl.col("cross_node"))
    if suspect.height < 8:
        return []
    own_inflation = float(suspect["inflation_own"].median())  # type: ignore[arg-type]
    link_inflation = float(suspect["inflation_link"].median() or 0.0)  # type: ignore[arg-type]
    lagging = lagging_ranks(ctx)
    # slower than the link all run long and not at a few ranks: the fabric is busy or
    # slow everywhere (a slow link next to a few ranks is slow_link's finding)
    whole_run = link_inflation >= th.fabric_inflation and not lagging
    # contention over less than half the run: the median cannot see it, its episodes can
    episode = _episodes(suspect, th.fabric_inflation)
    in_episode = float(episode.mean()) if len(episode) else 0.0
    during = float(suspect.filter(pl.Series(episode))["inflation_own"].median() or 0.0)  # type: ignore[arg-type]
    if own_inflation < th.fabric_inflation and in_episode >= th.fabric_episode_share:
        own_inflation = during
    inflation = max(own_inflation, link_inflation if whole_run else 0.0)
    if inflation < th.fabric_inflation and beside is None:
        return []
    if beside is None and own_traffic_only(ctx, ctx.nodes_of(_cross_ranks(ctx))):
        # the counters carry the job's bytes and nothing else: its own calls in flight
        # together share the links, each at its part of the rate (bandwidth)
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
    # Other flows on the hosts' links (their NIC counters carry bytes the job did not
    # send) are contention whatever the late rank does: the veto is for a slow rank
    # alone, whose host's links carry the job's bytes only.
    others = contended_hosts(ctx, ctx.nodes_of(_cross_ranks(ctx)))
    if own_corr >= th.fabric_skew_correlation and not others and beside is None:
        return []
    intra = sized.filter(~pl.col("cross_node"))
    steps = max(ctx.metrics.steps.height, 1)
    excess = float((suspect["service_ns"] - suspect["best_ns"] * suspect["concurrent"]).sum())
    excess /= steps
    measured_cost = excess / ctx.iteration_ns
    inflated_share = float((suspect["inflation"] >= th.fabric_inflation).mean())  # type: ignore[arg-type]
    at = "the link rate" if th.link_gbps > 0 else "the run's best rate"
    if beside is not None:
        at = beside.baseline
        inflation = max(inflation, beside.slower)
    replay = _contention_replay(ctx, beside, at)
    cost = replay.saving if replay is not None else measured_cost
    cross_ranks = _cross_ranks(ctx)
    # the source: hosts whose links carry other traffic (NIC counters), those sending
    # beyond the job's traffic and the busy shared links (link counters); who suffers:
    # the ranks ending late, else every rank of a cross-node group
    links = link_source(ctx)
    traffic = link_traffic(ctx)
    names = links.names if links is not None else ()
    # the host links whose other bytes leave their host, where the link counters'
    # busiest directions do not already name them
    sending = [n for n in (traffic.sending if traffic is not None else ()) if n not in names]
    senders = traffic.senders if traffic is not None else ()
    # hosts whose NICs send the other traffic; those only receiving it are where it
    # ends, named as its source only where no host is seen sending it
    nic_sending = nic_senders(ctx, others) or ([] if senders or sending else others)
    source = tuple(dict.fromkeys((*nic_sending, *senders, *names, *sending)))
    # the counters' intervals name what the whole run's counters did not: said in words
    besides = [x for x in beside.traffic.source if x not in source] if beside is not None else []
    source = (*source, *besides)
    nodes = ctx.nodes_of(lagging) if lagging else ctx.nodes_of(cross_ranks)
    evidence = {
        "median_inflation": round(inflation, 3),
        "inflation_over_own_best": round(own_inflation, 3),
        "inflation_over_link": round(link_inflation, 3) if th.link_gbps > 0 else None,
        "p90_inflation": round(float(suspect["inflation"].quantile(0.9, "linear")), 3),  # type: ignore[arg-type]
        "inflated_share": round(inflated_share, 4),
        "episode_share": round(in_episode, 4),
        "inflation_p50_all": round(float(suspect["inflation"].median()), 3),  # type: ignore[arg-type]
        "skew_transfer_correlation": round(corr, 3),
        "own_lateness_transfer_correlation": round(own_corr, 3),
        "excess_transfer_ms_per_iteration": ms(excess),
        "cross_node_busbw_gbps_p50": _p50(suspect["busbw_gbps"]),
        "intra_node_busbw_gbps_p50": _p50(intra["busbw_gbps"]),
        "intra_node_median_inflation": _p50(intra["inflation"]),
        "concurrency": int(suspect["concurrency"].max() or 1),
        "ranks_ending_late": lagging,
        "other_traffic_share_by_host": foreign_traffic(ctx) or None,
        "other_traffic_share_by_link": (traffic.foreign or None) if traffic is not None else None,
        "groups": sorted(suspect["group"].unique().to_list())[:20],
    }
    if links is not None:
        evidence.update(links.evidence())
    evidence.update(_beside_evidence(beside))
    causes = []
    if others:
        causes.append(
            f"the links of {', '.join(others)} carry other traffic beside the job's (NIC counters)"
        )
    if links is not None and links.text():
        causes.append(links.text())
    if sending:
        causes.append(
            f"{', '.join(sending)} carr{'ies' if len(sending) == 1 else 'y'} traffic "
            "beside the job's (link counters)"
        )
    if beside is not None and (besides or not causes):
        causes.append(_beside_text(beside))
    lead = f"{'; '.join(causes)}: " if causes else ""
    worst = ""
    if lagging:
        label = ", ".join(map(str, lagging))
        worst = f", worst at rank{'s' * (len(lagging) > 1)} {label} ({', '.join(nodes)})"
    return [
        ctx.finding(
            "fabric_contention",
            measured_cost,
            inflated_share,
            f"{lead}{_slower_text(inflation, beside)}{worst}, not explained by arrival skew; "
            f"at {at}, each iteration would be {cost:.1%} shorter",
            replay=replay,
            source=source,
            ranks=tuple(lagging),
            nodes=nodes,
            evidence=evidence,
            actions=advice.fabric_contention(),
        )
    ]


def _contention_replay(ctx: Context, beside: foreign.Beside | None, at: str) -> Outcome | None:
    """Contention removed: with other traffic found beside the job's, the transfers
    in its intervals at their baseline (outside them, else the links' capacity);
    otherwise every cross-node transfer at the link rate or the run's best."""
    if beside is not None:
        return _beside_replay(ctx, beside)
    return ctx.counterfactual(
        "links:cross",
        f"cross-node links at {at}",
        _link_change(ctx, _cross_ids(ctx)),
        cause="fabric_contention",
    )


def _beside_replay(ctx: Context, beside: foreign.Beside) -> Outcome | None:
    """The job's transfers beside other traffic at their baseline (:class:`foreign.Beside`)."""
    return ctx.counterfactual(
        "links:beside",
        f"cross-node transfers beside other traffic at {beside.baseline}",
        lambda p: cf.transfers_within(p, beside.target_ns, 0.0, beside.which),
        cause="fabric_contention",
    )


def _slower_text(inflation: float, beside: foreign.Beside | None) -> str:
    if beside is None:
        return (
            f"cross-node groups transfer {inflation:.2f}x slower than the run's own best "
            "at the same size"
        )
    return (
        f"cross-node transfers beside it are {beside.slower:.2f}x slower than at {beside.baseline}"
    )


def _beside_text(beside: foreign.Beside) -> str:
    """'h4 sends traffic that is not the job's over uplink leaf0→spine (62% of its
    bytes), 100% of the run' — counters interval by interval."""
    found = beside.traffic
    shares = found.share_by_carrier
    carriers = ", ".join(f"{c} ({shares[c]:.0%} of its bytes)" for c in found.named)
    who = ", ".join(found.senders)
    lead = (
        f"{who} send{'s' * (len(found.senders) == 1)} traffic that is not the job's over"
        if who
        else "traffic that is not the job's on"
    )
    return f"{lead} {carriers}, {found.covered:.0%} of the run (counters)"


def foreign_contention(ctx: Context) -> foreign.Beside | None:
    """Other traffic beside the job's on the links its cross-node groups use, with
    their transfers slower there by at least ``foreign_inflation``; ``None`` else."""

    def compute() -> foreign.Beside | None:
        # every size: the clean intervals' baseline is of the same size class, and
        # against the links' capacity only the calls whose bytes outweigh the latency
        # are judged (:func:`foreign.slower_beside`); on a slow fabric a 256 KiB call
        # is far past the knee that ``latency_knee_bytes`` puts at 1 MiB
        sized = _sized(ctx, 0)
        if sized.height == 0 or not has_cross_node_group(ctx):
            return None
        found = foreign.slower_beside(ctx, sized.filter(pl.col("cross_node")))
        if found is None or found.slower <= 1.0:
            return None
        if found.slower >= ctx.thresholds.foreign_inflation:
            return found
        # a little slower, but beside traffic the counters say is not the job's: what
        # it costs decides, by the one rule the verdict uses (a fixed-rate flow taking
        # a sixth of a link all run long slows each transfer ~1.17x and can cost 7-8 %)
        replay = _beside_replay(ctx, found)
        if replay is None or not costs.reported(replay.saving, replay.error, ctx.thresholds):
            return None
        return found

    return ctx.memo("foreign_contention", compute)


def _beside_evidence(beside: foreign.Beside | None) -> dict[str, Any]:
    if beside is None:
        return {}
    found = beside.traffic
    return {
        "foreign_share_by_carrier": found.share_by_carrier,
        "foreign_senders": list(found.senders),
        "foreign_time_share": found.covered,
        "transfers_beside_foreign": beside.count,
        "slower_beside_foreign": round(beside.slower, 3),
        "baseline": beside.baseline,
    }


def _episodes(suspect: pl.DataFrame, threshold: float) -> np.ndarray:
    """Per transfer (rows of ``suspect``): whether it lies in an episode, a run of
    consecutive transfers (in time) inflated by ``threshold`` or more, at least three
    long and a tenth of them. Background flows make episodes; noise scatters."""
    if suspect.height == 0:
        return np.zeros(0, dtype=bool)
    order = np.argsort(suspect["last_enter"].to_numpy(), kind="stable")
    hot = (suspect["inflation_own"].to_numpy() >= threshold)[order]
    need = max(3, int(np.ceil(0.1 * len(hot))))
    edges = np.flatnonzero(np.diff(np.r_[0, hot.astype(np.int8), 0]))
    marked = np.zeros(len(hot), dtype=bool)
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        if b - a >= need:
            marked[a:b] = True
    out = np.zeros(len(hot), dtype=bool)
    out[order] = marked
    return out


def _cross_ranks(ctx: Context) -> list[int]:
    return list(ctx.metrics.ranks) if has_cross_node_group(ctx) else []


def slow_link(ctx: Context) -> list[Finding]:
    """Transfers that end late at a few ranks, persistently: the ranks next to a slow
    link in the ring (the last step of a ring reaches them over it). Named: the ranks
    and their hosts."""
    if not has_cross_node_group(ctx) or ctx.program is None:
        return []
    late = lagging_ranks(ctx)
    if not late:
        return _counted_only(ctx)
    if contended_hosts(ctx, ctx.nodes_of(late)):
        return []  # other flows on those hosts' links: contention, not a slow link
    if foreign_contention(ctx) is not None:
        return []  # other traffic on the links the job uses: contention's ranks ending late
    th = ctx.thresholds
    # the lag says which ranks sit next to a slow link; where the fabric's counters show
    # which host link is set slow, that link's host is named (on two hosts every
    # transfer crosses both host links, and the ring's last hop decides who lags)
    rates = counted.link_rates(ctx, None)
    fastest = max(rates.values(), default=0.0)
    slower = counted.slower_links(ctx, rates)
    lagging = late
    on_slower = cpu.ranks_on(ctx, list(slower))
    if on_slower:
        late = on_slower
    every = sorted(set(ctx.metrics.placement["node"].to_list()))
    at = set(ctx.nodes_of(late))
    # a host is named only where it stands out in each half of the run, and a slow
    # link on every host at once is no host's: the fabric's, or the job's transfers
    if not at <= set(slow_places(ctx)) or (at == set(every) and not slower):
        change = _fabric_lag_fixed(ctx, lagging)
        by_half = (lagging_ranks(ctx, 0), lagging_ranks(ctx, 1))
        return [fabricwide.finding(ctx, lagging, by_half, rates, change)]
    lags = transfer_lags(ctx).filter(pl.col("rank").is_in(lagging))
    label = ",".join(map(str, late))  # the counterfactual's name
    named = ", ".join(map(str, late))  # as every text names ranks
    rate = nominal.nominal(ctx)
    # fixed, neither the ranks behind it nor those its lag shows at wait
    change = _slow_link_fixed(ctx, sorted(set(late) | set(lagging)))
    if rate is not None:
        what = f"links of ranks {named} at {rate.source}"
    else:
        what = f"collectives ending at ranks {named} with the others"
    replay = ctx.counterfactual(f"slow_link:{label}", what, change, cause="slow_link")
    assert replay is not None
    nodes = ctx.nodes_of(late)
    lag_ms = dict(zip(lags["rank"].to_list(), map(ms, lags["lag_ns"].to_list()), strict=True))
    last = float(ctx.metrics.per_rank.filter(pl.col("rank").is_in(late))["last_share"].sum())
    # a link slow from start to end slows the run's best transfers too: against them
    # the saving is a floor, which the finding says
    baseline = f" (at {rate.words})" if rate is not None else f"; {nominal.OWN_BEST}"
    lag = float(np.median(list(lag_ms.values())))
    if on_slower:
        words = {h: rate_words(r / 8e9) for h, r in slower.items()}
        where = (
            f"{', '.join(f'host link of {h} set to {w}' for h, w in words.items())}, "
            f"the fastest {rate_words(fastest / 8e9)} (link counters): "
            f"rank{'s' if len(late) > 1 else ''} "
            f"{named} ({', '.join(nodes)}) behind it; collectives end late at rank"
            f"{'s' if len(lagging) > 1 else ''} {', '.join(map(str, lagging))} by {lag:.2f} ms"
        )
    else:
        where = (
            f"collectives end late at rank{'s' if len(late) > 1 else ''} {named} "
            f"({', '.join(nodes)}), by {lag:.2f} ms: they sit next to a slow link in the ring"
        )
    return [
        ctx.finding(
            "slow_link",
            0.0,
            min(1.0, 0.5 + last / 2),
            f"{where}; fixed, each iteration would be {replay.saving:.1%} shorter{baseline}",
            replay=replay,
            ranks=tuple(late),
            nodes=nodes,
            evidence={
                "lagging_ranks": lagging,
                "slow_host_links_bps": slower if on_slower else {},
                "transfer_lag_ms": lag_ms,
                "last_share": round(last, 4),
                "noise_ms": ms(float(transfer_lags(ctx)["noise_ns"][0])),
                "link_gbps": th.link_gbps or None,
                "baseline": rate.to_json() if rate is not None else "the run's own best",
            },
            actions=advice.slow_link(nodes),
        )
    ]


def _counted_only(ctx: Context) -> list[Finding]:
    """No rank lags, yet the counters show one host's link slower than its peers' and
    busier against its own rate (:mod:`.counted`): every transfer of the ring crosses
    it, so every rank waits alike."""
    hosts = counted_hosts(ctx)
    if not hosts:
        return []
    return [counted.finding(ctx, hosts, _slow_link_fixed(ctx, cpu.ranks_on(ctx, hosts)))]


def counted_hosts(ctx: Context) -> list[str]:
    """The hosts :func:`counted.places` finds, unless other traffic shares the links
    (the hosts' NIC counters, the link counters, or transfers slower beside foreign
    bytes): that is contention's, checked first."""

    def compute() -> list[str]:
        hosts = counted.places(ctx)
        if not hosts or contended_hosts(ctx, hosts) or foreign_contention(ctx) is not None:
            return []
        traffic = link_traffic(ctx)
        others = traffic.foreign if traffic is not None else {}
        ends = [n.split(" ")[-1].split("→") for n in others]
        return [] if any(h in pair for h in hosts for pair in ends) else hosts

    return ctx.memo("counted_hosts", compute)


def fixed_link_ranks(ctx: Context) -> list[int]:
    """The ranks whose slow link a fix of it frees: those lagging, else those on the
    hosts the counters alone name (:func:`counted_hosts`)."""
    lagging = lagging_ranks(ctx)
    return lagging if lagging else cpu.ranks_on(ctx, counted_hosts(ctx))


def slow_places(ctx: Context) -> list[str]:
    """The hosts a slow link finding may name: over the run and in each of its halves
    alone (:func:`halves.in_each_half`), those whose own link the counters show set
    slower than the others' over it, else (no counters there, or none slower) the
    hosts of the ranks lagging in it (:func:`lagging_ranks`)."""

    def judge(half: int | None) -> set[str]:
        rates = counted.link_rates(ctx, half)
        slower = counted.slower_links(ctx, rates)
        if slower:
            return set(slower)
        return set(ctx.nodes_of(lagging_ranks(ctx, half)))

    return halves.in_each_half(ctx, judge)


def _fabric_lag_fixed(ctx: Context, lagging: list[int]) -> Any:
    """Collectives ending at ``lagging`` with the others', nothing more: with no host's
    link slower than the others' the links' capacity is no baseline of this cause (the
    generic row, every link at the rate, holds what the transfers lose beyond it)."""
    return lambda p: cf.exits_aligned(p, lagging)


def _slow_link_fixed(ctx: Context, late: list[int]) -> Any:
    """The change that fixes the slow link next to ``late``: their collectives end
    with the others' and, where the links' capacity is known, the cross-node
    transfers of their groups run at it (a link slow all run long slows every
    transfer of the ring, not only the ends the ranks next to it see)."""

    def change(p: Any) -> Any:
        aligned = cf.exits_aligned(p, late)
        groups = _groups_with(ctx, late)
        which = ctx.metrics.instances["group"].is_in(groups).to_numpy() & _cross_ids(ctx)
        rate = nominal.at_capacity(ctx, p, which)
        return aligned if rate is None else cf.combine([aligned, rate])

    return change


def _groups_with(ctx: Context, ranks: list[int]) -> list[str]:
    """Groups of the collectives these ranks took part in."""
    prog = ctx.program
    if prog is None:
        return []
    posted = np.flatnonzero(cf.instances_with(prog, ranks))
    return ctx.metrics.instances["group"].gather(posted).unique().to_list()


def _large(ctx: Context) -> np.ndarray:
    return (ctx.metrics.instances["bytes"] >= ctx.thresholds.latency_knee_bytes).to_numpy()


def _fixed_part(ctx: Context) -> tuple[float, str]:
    """The latency (ns) fewer bytes would not remove from a large transfer, and where
    it comes from: the link benchmark's α, else a fit over the run's own sizes, else
    none (one size, no benchmark: time is taken as proportional to bytes, which
    overstates the saving by the latency's share; measured on 8 MiB all-reduces over
    loopback, whose 4 MiB reruns took 0.71 of their time, not half)."""
    th = ctx.thresholds
    if th.link_gbps > 0:
        alpha = th.link_alpha_us * 1e3
        return alpha, f"their {alpha / 1e6:.2f} ms latency (the link benchmark's) kept"
    prog = ctx.program
    fitted = cf.own_latency(prog, _large(ctx)) if prog is not None else None
    if fitted is not None:
        return fitted, f"their {fitted / 1e6:.2f} ms latency (fitted over the run's sizes) kept"
    return 0.0, "time taken as proportional to bytes (one size and no link benchmark)"


def bandwidth_bound(ctx: Context) -> list[Finding]:
    """Large transfers near the link's rate that leave the iteration waiting even where
    overlap cannot hide them: the bytes are the limit, not latency or overlap.

    With a replay the cost is what freeing the large transfers saves beyond what ideal
    overlap already saves (what overlap could hide is poor overlap's cost)."""
    m, th = ctx.metrics, ctx.thresholds
    comm = m.comm
    exposed = comm.get("exposed_share", 0.0)
    if exposed < th.bandwidth_min_exposed:
        return []  # hidden communication costs nothing
    big = m.instances.filter(
        pl.col("bytes") >= th.latency_knee_bytes, pl.col("busbw_gbps").is_not_null()
    ).with_columns(aggregate=pl.col("busbw_gbps") * pl.col("concurrent"))
    if big.height == 0:
        return []
    median = float(big["aggregate"].median())  # type: ignore[arg-type]
    reference = th.link_gbps or float(big["aggregate"].quantile(0.95, "linear"))  # type: ignore[arg-type]
    if reference <= 0:
        return []
    # Far below the best rate is the fabric's doing (contention), not the bytes'. Within
    # one node there is no fabric to blame: how fast the node moves bytes is its rate.
    if has_cross_node_group(ctx) and median < th.bandwidth_near_best * reference:
        return []
    # Links that carry other flows beside the job's are contended: the bytes that fill
    # them are not all the job's (fabric_contention's case).
    if has_cross_node_group(ctx) and (contended_hosts(ctx) or foreign_contention(ctx)):
        return []
    replay = None
    if ctx.program is not None:
        # what the bytes cost once overlap is as good as it can be (ideal, or the
        # communication after compute re-bucketed during it) and any slow link is fixed:
        # those are poor overlap's and slow_link's costs, not claimed twice
        lagging = fixed_link_ranks(ctx)
        fix = overlap_fix(ctx)

        def others(p: Any) -> Any:
            fixes = [fix.change if fix is not None else cf.ideal_overlap(p)]
            if lagging:
                fixes.append(_slow_link_fixed(ctx, lagging)(p))
            return cf.combine(fixes)

        first = ctx.counterfactual(
            "overlap+links", "overlap fixed and no slow link", others, cause="poor_overlap"
        )
        free = ctx.counterfactual(
            "overlap+links+bytes",
            "overlap fixed, no slow link and large transfers free",
            lambda p: cf.combine([others(p), cf.transfers_scaled(p, 0.0, _large(ctx))]),
            bytes_kept=False,
        )
        fixed, fixed_from = _fixed_part(ctx)
        half = ctx.counterfactual(
            "half-bytes",
            f"large transfers with half the bytes (BF16), {fixed_from}",
            lambda p: cf.transfers_scaled(p, 0.5, _large(ctx), fixed),
            bytes_kept=False,
        )
        assert first is not None and free is not None and half is not None
        replay = _residual(first, free)
        if replay.saving < th.bandwidth_min_exposed:
            return []
        ctx.replays["bandwidth"] = (replay, ctx.replays["overlap+links+bytes"][1])
    elif comm.get("overlap_ratio", 1.0) < th.overlap_max_ratio:
        return []  # unoverlapped is poor_overlap's case
    cost = replay.saving if replay is not None else exposed
    evidence = {
        "busbw_gbps_p50": round(median, 3),
        "reference_busbw_gbps": round(reference, 3),
        "reference": "link_gbps" if th.link_gbps else "run's p95 busbw",
        "bytes_p50": int(big["bytes"].median() or 0),  # type: ignore[arg-type]
        "exposed_share": round(exposed, 4),
        "overlap_ratio": round(comm.get("overlap_ratio", 0.0), 4),
        "busbw_assumes": "flat topology (nccl-tests factors); summed over concurrent calls",
    }
    if replay is not None:
        evidence["half_bytes_saving"] = round(ctx.replays["half-bytes"][0].saving, 4)
    return [
        ctx.finding(
            "bandwidth_bound",
            exposed,
            min(1.0, median / reference),
            f"large collectives run at {median:.3g} GB/s busbw ({median / reference:.0%} of "
            f"{'the link rate' if th.link_gbps else 'the best seen'}) and leave the iteration "
            f"waiting beyond what overlap can hide: bytes are the limit; without them each "
            f"iteration would be {cost:.1%} shorter",
            replay=replay,
            evidence=evidence,
            actions=advice.bandwidth_bound(m.parallelism),
        )
    ]


def _residual(first: Outcome, both: Outcome) -> Outcome:
    """What ``both`` saves beyond ``first`` (errors add)."""
    return Outcome(
        name="bandwidth",
        description="large transfers free, beyond overlap and links",
        iteration_ns=both.iteration_ns,
        saving_ns=both.saving_ns - first.saving_ns,
        saving=max(0.0, both.saving - first.saving),
        error=first.error + both.error,
        cause="bandwidth_bound",
    )


def _p50(values: pl.Series) -> float | None:
    return round(float(values.median()), 3) if values.len() else None  # type: ignore[arg-type]
