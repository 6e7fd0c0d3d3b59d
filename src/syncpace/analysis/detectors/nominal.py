"""The links' nominal capacity: the baseline a cause that never lets up is costed against.

A slow link or contention present from the first iteration to the last slows the run's
best transfers too, so "every link at the run's best rate" removes little of it. Where
the capacity of the links is known apart from the run — the rate set by
``--link-gbps`` or a benchmark (``--bench``: bus bandwidth), else the fabric's
declared host links or the hosts' NIC speeds as the counters recorded them
(:attr:`RunMetrics.link`, a host's line rate) — a transfer at that capacity is the
baseline, and no counterfactual costs a transfer faster than it (a physical ceiling).
Where none is known the run's own best stays the baseline and the findings say that
their saving may be understated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from syncpace.analysis import links
from syncpace.analysis.limits import rate_words
from syncpace.analysis.replay import Change, Program
from syncpace.analysis.replay import counterfactuals as cf
from syncpace.trace.busbw import bus_factor

if TYPE_CHECKING:  # the context imports this module: typed only, never imported here
    from syncpace.analysis.detectors.context import Context

#: Said where no capacity is known apart from the run.
OWN_BEST = (
    "the baseline is the run's own best transfers (no link rate known: set --link-gbps "
    "or --bench), which a cause lasting the whole run slows too: the saving may be "
    "understated"
)


@dataclass(frozen=True)
class Nominal:
    """The links' capacity (GB/s = bytes/ns), where it was read, and whether it is a
    bus bandwidth (a set or benchmarked rate: each member moves bytes x nccl-tests'
    factor over the group's ranks) or a host's line rate (each host moves bytes x the
    factor over the group's hosts: nothing inside a host crosses its link)."""

    gbps: float
    source: str
    bus: bool
    alpha_ns: float = 0.0
    #: where a host's line rate was read (the fabric's or the hosts' counters)
    origin: str = ""

    @property
    def words(self) -> str:
        """'the link rate set, 9.6 Gbit/s' / 'the hosts' link rate, 100 Mbit/s'."""
        return f"{self.source}, {rate_words(self.gbps)}"

    def to_json(self) -> dict[str, Any]:
        out = {"gbps": self.gbps, "source": self.source, "alpha_us": self.alpha_ns / 1e3}
        return {**out, "read_from": self.origin} if self.origin else out


def nominal(ctx: Context) -> Nominal | None:
    """The capacity known apart from the run: the set or benchmarked rate first, else
    the fastest host link the fabric's or the hosts' counters declare (the healthy
    peers' capacity: a slow host's own link is never the fastest). ``None`` when
    neither is known."""
    th = ctx.thresholds
    if th.link_gbps > 0:
        return Nominal(th.link_gbps, "the link rate set", True, th.link_alpha_us * 1e3)
    return line_rate(ctx)


def volume_ns(ctx: Context, prog: Program, rate: Nominal, *, bound: bool = False) -> np.ndarray:
    """Per instance: its bytes' time at ``rate`` alone on the links (ns); nan where
    the rate does not bound it (an op moving no data; a group inside one host, for a
    host's line rate). A bus bandwidth is per rank, nccl-tests' factor over the group's
    ranks. At a host's line rate, the time of the busiest link direction: for the ops
    that go round a ring of the group's ranks, each edge between hosts carries the
    factor over the ranks, and a link direction as many edges as cross it
    (:func:`ring_load`: what the job's transfers take on healthy links); for the others,
    and with ``bound``, each host its bytes times the factor over the group's hosts:
    the least any algorithm moves through a host's link (a hierarchical one keeps the
    rest inside the host), for a ceiling no counterfactual may pass."""
    inst = prog.instances
    spans = ctx.metrics.group_nodes
    loads = ring_load(ctx) if not (rate.bus or bound) else {}
    out = np.full(inst.height, np.nan)
    rows = zip(inst["op"].to_list(), inst["n"].to_list(), inst["group"].to_list(), strict=True)
    for k, (op, n, group) in enumerate(rows):
        load = loads.get(group) if op in RING_OPS else None
        over = int(n) if rate.bus or load is not None else int(spans.get(group, 1))
        factor = bus_factor(op, over) if over > 1 else None
        if factor:
            out[k] = factor * (load or 1.0) / rate.gbps
    return out * inst["bytes"].to_numpy().astype(np.float64)


#: Ops whose bytes go round a ring of the group's ranks, each rank sending to the next
#: (gloo's, and NCCL's ring): every edge carries nccl-tests' factor over the ranks.
RING_OPS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"})


def ring_load(ctx: Context) -> dict[str, float]:
    """Per process group that spans hosts: the load of its ring's busiest link
    direction, in edges at the hosts' line rate. The ring is the group's ranks in
    group order, each sending to the next; an edge between two hosts crosses the
    sending host's link out and the receiving one's in and, where the fabric's counters
    declare the links between (:func:`links.fabric_paths`), the switches' links on the
    way, each at its own largest rate (an uplink at half the line rate counts twice
    per edge). Ranks of one host in a row cost one edge each way, whatever their
    number: the factor over the ranks, not over the hosts (4 ranks on 2 hosts move 1.5
    times their bytes through each host's link, not 1)."""

    def compute() -> dict[str, float]:
        line = line_rate(ctx)
        node_of = ctx.metrics.node_of()
        fabric = links.fabric_paths(ctx.metrics.run)
        out: dict[str, float] = {}
        for group, ranks in ctx.metrics.group_ranks.items():
            nodes = [node_of.get(r) for r in ranks]
            if None in nodes or len(set(nodes)) < 2:
                continue
            edges: dict[tuple[str, str], float] = {}
            for a, b in zip(nodes, nodes[1:] + nodes[:1], strict=True):
                if a == b:
                    continue
                for hop, share in _hops(fabric, line, str(a), str(b)):
                    edges[hop] = edges.get(hop, 0.0) + share
            out[group] = max(edges.values())
        return out

    return ctx.memo("ring_load", compute)


def _hops(
    fabric: links.Paths | None, line: Nominal | None, a: str, b: str
) -> list[tuple[tuple[str, str], float]]:
    """The link directions an edge from host ``a`` to host ``b`` crosses, each with the
    time its bytes take there over their time at the line rate: the hosts' own links at
    the line rate (a slow host's own link is the cause being costed, never the
    capacity); the fabric's others at their declared rate."""
    ends = [((a, "out"), 1.0), ((b, "in"), 1.0)]
    hops = fabric.path(a, b) if fabric is not None else None
    if hops is None or line is None:
        return ends
    inner = [hop for hop in hops if fabric.kinds[hop] != "host"]
    return ends + [(hop, line.gbps * 8e9 / fabric.rates[hop]) for hop in inner]


def line_rate(ctx: Context) -> Nominal | None:
    """The hosts' line rate, as the fabric's or the hosts' counters declare it (the
    fastest host link), whatever rate was set or benchmarked; ``None`` when unknown."""
    link = ctx.metrics.link
    if link is None or link.gbps <= 0:
        return None
    return Nominal(link.gbps, "the hosts' link rate", False, origin=link.source)


def _alone_ns(ctx: Context, prog: Program, rate: Nominal, *, bound: bool = False) -> np.ndarray:
    """Per instance: its bytes' time alone at ``rate`` beyond α, and no shorter than
    at the hosts' line rate where a set or benchmarked bus bandwidth is faster than
    that line allows. A benchmark on shaped links measures the shaper's burst (a token
    bucket lets its first kilobytes through at the wire's speed: 140 Mbit/s of bus
    bandwidth fitted on 100 Mbit/s links), and no ring moves its bytes faster than its
    hosts' links carry them. ``bound``: see :func:`volume_ns`."""
    alone = volume_ns(ctx, prog, rate, bound=bound)
    wire = line_rate(ctx) if rate.bus else None
    if wire is None:
        return alone
    return np.fmax(alone, volume_ns(ctx, prog, wire, bound=bound) - rate.alpha_ns)


def at_capacity(ctx: Context, prog: Program, which: np.ndarray | None = None) -> Change | None:
    """The ``which`` transfers at the nominal capacity: α + their bytes at the rate
    (never faster than the hosts' line rate allows), times the collectives they would
    share the links with at that speed
    (:func:`~syncpace.analysis.replay.counterfactuals.shared_model`). ``None`` when
    no capacity is known."""
    rate = nominal(ctx)
    if rate is None:
        return None
    return cf.transfers_within(prog, _alone_ns(ctx, prog, rate), rate.alpha_ns, which)


def ceiling(ctx: Context, prog: Program) -> np.ndarray | None:
    """Per instance: the shortest time the known capacity allows (α + its bytes at
    the rate, never faster than the hosts' line rate allows; nan where it does not
    bound it), whatever algorithm moves them (``bound``: a re-bucketed or spread call's
    time is the run's own, which this only keeps physical); ``None`` when no capacity
    is known."""
    rate = nominal(ctx)
    if rate is None:
        return None
    return rate.alpha_ns + _alone_ns(ctx, prog, rate, bound=True)


def held_to(change: Change, prog: Program, floor: np.ndarray | None) -> Change:
    """``change`` with no transfer it shortens made faster than ``floor`` (a measured
    time already below it stays as measured: a counterfactual only removes time)."""
    if floor is None or change.service is None:
        return change
    made, measured = change.service, prog.service
    bound = np.fmin(measured, floor)
    held = np.where(made < measured, np.fmax(made, bound), made)
    return Change(change.gap, change.delta, change.wait_on, held, change.pacer)
