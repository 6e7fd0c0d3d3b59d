"""A slow link named from the link counters alone, where no rank lags.

In a ring every transfer crosses each link once a step, so a host link set slower
slows every transfer alike: every rank waits the same, arrival skew and "lagging
ranks" point nowhere (measured: a 3-host ring with one host link at 75 of 200 Mbit/s,
the collectives 2.4 times longer and no rank ending them late in most). The counters
still show it: that host link is set below its peers' rate and, carrying the same
bytes as they do, is busier against its own speed than any of them. Such a host is
named where both hold over the run and in each of its halves; the cost is the replay
with the transfers that cross it at the peers' nominal capacity (the run's best is no
baseline: the cause never lets up). A link slow on every host alike is none slower
than its peers and stays the fabric's finding; traffic that is not the job's on the
links is contention's, checked before this (:func:`network.slow_link`).
"""

from __future__ import annotations

from typing import Any

from syncpace.analysis.detectors import advice, cpu, halves, nominal
from syncpace.analysis.detectors.context import Context
from syncpace.analysis.findings import Finding
from syncpace.analysis.limits import rate_words
from syncpace.analysis.links import busiest_links, host_link_rates


def link_rates(ctx: Context, half: int | None) -> dict[str, float]:
    """Each host's own link rate (bit/s) over ``half`` of the run (None: all of it), as
    the counters record it (:func:`host_link_rates`); empty without counters. Read
    once a run and half: the slow link's judgements each ask for it."""
    return ctx.memo(
        f"link_rates:{half}",
        lambda: host_link_rates(ctx.metrics.run, halves.window(ctx, half)),
    )


def host_loads(ctx: Context, half: int | None) -> dict[str, float]:
    """Per host: its own link's mean utilisation against its own rate over ``half``
    of the run (None: all of it), the busier direction; empty without counters."""

    def compute() -> dict[str, float]:
        loads: dict[str, float] = {}
        rates = link_rates(ctx, half)
        window = halves.window(ctx, half)
        for load in busiest_links(ctx.metrics.run, window, top=None, min_util=0):
            if load.kind != "host":
                continue
            host = load.src if load.src in rates else load.dst
            loads[host] = max(loads.get(host, 0.0), load.util)
        return loads

    return ctx.memo(f"host_loads:{half}", compute)


def _job_rates(ctx: Context, half: int | None) -> dict[str, float]:
    """The job's hosts' own link rates (bit/s) over ``half`` of the run, as the
    counters record them: a fabric's other hosts carry none of its bytes."""
    job = set(ctx.metrics.placement["node"].to_list())
    return {h: r for h, r in link_rates(ctx, half).items() if h in job}


def slower_links(ctx: Context, rates: dict[str, float]) -> dict[str, float]:
    """The hosts whose own link the counters show set below ``slow_link_rate_share``
    of the fastest host link's rate (``rates``: bit/s by host), with their rate."""
    fastest = max(rates.values(), default=0.0)
    share = ctx.thresholds.slow_link_rate_share
    return {h: r for h, r in rates.items() if r < share * fastest}


def slower_and_busier(ctx: Context, half: int | None) -> dict[str, float]:
    """The hosts (with their link's rate, bit/s) whose own link the counters show set
    below ``slow_link_rate_share`` of the fastest peer's (:func:`slower_links`) and
    busier against its own rate than every peer's by the same margin: the link the
    job's bytes wait on, of the job's hosts only."""
    share = ctx.thresholds.slow_link_rate_share
    rates = _job_rates(ctx, half)
    loads = host_loads(ctx, half)
    found = {}
    for host, rate in slower_links(ctx, rates).items():
        busy = max(loads.get(h, 0.0) for h in rates if h != host)  # a slower host has peers
        if loads.get(host, 0.0) * share > busy:
            found[host] = rate
    return found


def places(ctx: Context) -> list[str]:
    """The hosts :func:`slower_and_busier` finds over the run and in each half alone."""
    return halves.in_each_half(ctx, lambda half: slower_and_busier(ctx, half))


def finding(ctx: Context, hosts: list[str], change: Any) -> Finding:
    """The slow link of ``hosts``, named from the counters alone; ``change`` its
    counterfactual (the transfers crossing it at the nominal capacity)."""
    ranks = cpu.ranks_on(ctx, hosts)
    rates = _job_rates(ctx, None)
    loads = {h: u for h, u in host_loads(ctx, None).items() if h in rates}
    rate = nominal.nominal(ctx)
    named = ", ".join(map(str, ranks))
    what = f"links of ranks {named} at {rate.source}" if rate is not None else f"ranks {named}"
    replay = ctx.counterfactual(
        f"slow_link:{','.join(map(str, ranks))}", what, change, cause="slow_link"
    )
    assert replay is not None
    peers = {h: r for h, r in rates.items() if h not in hosts}
    slow = {h: rates[h] for h in hosts}
    words = ", ".join(
        f"host link of {h} set to {rate_words(r / 8e9)}, {loads.get(h, 0.0):.0%} busy"
        for h, r in slow.items()
    )
    peer_busy = max((loads.get(h, 0.0) for h in peers), default=0.0)
    baseline = f" (at {rate.words})" if rate is not None else f"; {nominal.OWN_BEST}"
    return ctx.finding(
        "slow_link",
        0.0,
        0.75,
        f"{words}; the other hosts' links at {rate_words(max(peers.values()) / 8e9)}, at most "
        f"{peer_busy:.0%} busy (link counters): every transfer of the ring crosses it, so "
        f"every rank waits alike; rank{'s' * (len(ranks) > 1)} {named} ({', '.join(hosts)}) "
        f"behind it; fixed, each "
        f"iteration would be {replay.saving:.1%} shorter{baseline}",
        replay=replay,
        ranks=tuple(ranks),
        nodes=tuple(hosts),
        evidence={
            "placed": True,
            "from_counters": True,
            "lagging_ranks": [],
            "slow_host_links_bps": slow,
            "host_link_bps": rates,
            "host_link_utilisation": {h: round(u, 4) for h, u in sorted(loads.items())},
            "baseline": rate.to_json() if rate is not None else "the run's own best",
        },
        actions=advice.slow_link(hosts),
    )
