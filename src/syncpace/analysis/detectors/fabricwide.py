"""Slow transfers that are no one host's link: the fabric's, or the job's own.

Ranks whose collectives end late name the link beside them only where the same hosts
stand out over the run and in each of its halves (``network.slow_places``). Where the
ranks ending late change from one half to the next, or sit on every host at once with
no host link set slower than the others', no link of a host explains them: a user
told "slow link on h0, h1, h2" checks three cables that are fine. This finding names
no host and no rank; it says where the collectives ended late in each half and what
the link counters show of the hosts' links, against the links' known capacity.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from syncpace.analysis.detectors import advice, halves, nominal
from syncpace.analysis.detectors.context import Context, ms
from syncpace.analysis.findings import Finding
from syncpace.analysis.limits import rate_words


def finding(
    ctx: Context,
    lagging: list[int],
    by_half: tuple[list[int], list[int]],
    rates: dict[str, float],
    change: Any,
) -> Finding:
    """The slow link finding of no host: ``lagging`` the ranks whose collectives end
    late over the run, ``by_half`` in each half, ``rates`` the hosts' own link rates
    the counters recorded (bit/s; empty without them), ``change`` its counterfactual
    (the collectives ending with the others'). Its severity is the shared rule on the
    replay's saving."""
    every = sorted(set(ctx.metrics.placement["node"].to_list()))
    label = ",".join(map(str, lagging))
    replay = ctx.counterfactual(
        f"slow_link:{label}",
        f"collectives ending at ranks {', '.join(map(str, lagging))} with the others",
        change,
        cause="slow_link",
    )
    assert replay is not None
    hosts_of = {
        r: ctx.nodes_of([r])[0] for r in sorted(set(lagging) | set(by_half[0] + by_half[1]))
    }

    moving = by_half[0] != by_half[1] or not set(ctx.nodes_of(lagging)) < set(every)
    why = (
        "on every host at once"
        if set(ctx.nodes_of(lagging)) == set(every)
        else "on hosts that change between the halves of the run"
    )
    links = _links_words(ctx, rates)
    last = float(ctx.metrics.per_rank.filter(pl.col("rank").is_in(lagging))["last_share"].sum())
    return ctx.finding(
        "slow_link",
        0.0,
        min(1.0, 0.5 + last / 2),
        f"slow transfers, not one host's link: collectives end late {why} — "
        f"{halves.ranks_where(ctx, lagging)} over the run, "
        f"{halves.ranks_where(ctx, by_half[0])} in its first half, "
        f"{halves.ranks_where(ctx, by_half[1])} in the "
        f"second{links}; the fabric's or the job's transfers, no host to check; with "
        f"them ending together each iteration would be {replay.saving:.1%} shorter",
        replay=replay,
        ranks=(),
        nodes=tuple(every),
        evidence={
            "placed": False,
            "moving": moving,
            "lagging_ranks": lagging,
            "lagging_ranks_first_half": by_half[0],
            "lagging_ranks_second_half": by_half[1],
            "lagging_hosts": {str(r): h for r, h in hosts_of.items()},
            "host_link_bps": rates,
            "iteration_ms": ms(ctx.iteration_ns),
        },
        actions=advice.slow_fabric(every),
    )


def _links_words(ctx: Context, rates: dict[str, float]) -> str:
    """What the counters say of the hosts' links, against the known capacity."""
    if not rates:
        return ""
    values = sorted(set(rates.values()))
    if len(values) == 1:
        said = f"; every host's link at {rate_words(values[0] / 8e9)} (link counters)"
    else:
        said = f"; the hosts' links at {rate_words(values[0] / 8e9)}–{rate_words(values[-1] / 8e9)}"
    cap = nominal.nominal(ctx)
    return f"{said}, capacity {cap.words}" if cap is not None else said
