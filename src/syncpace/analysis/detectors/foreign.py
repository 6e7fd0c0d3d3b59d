"""Traffic that is not the job's, interval by interval, on the links the job uses.

Per counter interval — each NIC window of the hosts' counters, each sampling interval
of the emulated fabric's link counters — the bytes counted minus the job's own in it:
each collective's bytes × nccl-tests' bus factor, per member rank, spread evenly over
its transfer (last arrival to completion), summed over the ranks of the host that send
across its link: of a ring op (all-reduce, all-gather, reduce-scatter) the ranks whose
successor in the group is on another host, of any other op every rank (an upper
bound: bytes between ranks of one host never leave it, so the foreign bytes are a
lower bound). An interval carries foreign traffic when those bytes reach
``FOREIGN_SHARE`` of what was counted and ``FOREIGN_RATE`` of the link's rate.

The links the job's cross-node groups use: its hosts' NICs and host links, and the
switch links (uplinks) next to a switch one of its hosts hangs from — whose own bytes
there are at most those of the hosts below either end. The hosts sending the foreign
bytes (their host link's sending direction, in the job or not) are the source.

How much slower the job's cross-node transfers are in those intervals
(:func:`slower_beside`) is measured against its transfers of the same op, group size
and size class outside them, else — foreign traffic all run long — against the links'
capacity (:mod:`~syncpace.analysis.detectors.nominal`); whether that is contention is
the detector's to judge (:mod:`syncpace.analysis.detectors.network`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from syncpace.analysis.detectors import nominal
from syncpace.analysis.detectors.context import Context
from syncpace.analysis.detectors.traffic import FOREIGN_RATE, FOREIGN_SHARE, job_bytes
from syncpace.analysis.links import host_ends, host_link_rates, link_intervals, link_name
from syncpace.analysis.replay.program import POST
from syncpace.trace.busbw import bus_factor


@dataclass(frozen=True)
class ForeignTraffic:
    """Foreign traffic on the links the job uses: per carrier (a host's NICs by the
    host's name, a link direction by its one name) the share of its bytes that is not
    the job's over its foreign intervals; the hosts sending it; the intervals (ns,
    merged over the carriers) and the share of the time the counters saw that they
    cover."""

    share_by_carrier: dict[str, float]
    senders: tuple[str, ...]
    #: the carriers named as the source: not a host link's direction into its host,
    #: where the foreign bytes end rather than where they come from or cross
    named: tuple[str, ...]
    intervals: np.ndarray  # (k, 2): start, end
    covered: float
    #: the intervals the counters of those links saw at all (foreign traffic or not)
    observed: np.ndarray
    #: (k, 3): each carrier's foreign span on those links: start, end, and the share
    #: of the carrier's rate its foreign bytes took
    took: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    #: the intervals where bytes not the job's took ``FOREIGN_RATE`` of a link's rate,
    #: foreign traffic or not (under ``FOREIGN_SHARE`` of the bytes beside a busy job)
    unclear: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))

    def covers(self, times: np.ndarray) -> np.ndarray:
        """Per time (ns): whether it falls in a foreign interval."""
        return _within(self.intervals, times)

    def beside(self, times: np.ndarray) -> np.ndarray:
        """Per time (ns): whether it falls in a foreign interval or in one where bytes
        not the job's took ``FOREIGN_RATE`` of a link's rate. Foreign traffic once
        found, a flow of a sixth of the link beside a job that keeps it busy is under
        ``FOREIGN_SHARE`` of the bytes in some intervals and over it in others: the
        transfers of both are as slow."""
        near = self.covers(times)
        return near | _within(self.unclear, times) if len(self.unclear) else near

    def clean(self, times: np.ndarray) -> np.ndarray:
        """Per time (ns): whether the counters saw it and found no bytes but the job's
        to speak of (:meth:`beside` does not hold)."""
        return _within(self.observed, times) & ~self.beside(times)

    def rate_share(self, times: np.ndarray) -> np.ndarray:
        """Per time (ns): the largest share of a carrier's rate foreign bytes took then
        on the links the job uses (the nearest span's where none holds the time: the
        first and last spans stand for the window's edges)."""
        if len(self.took) == 0:
            return np.zeros(len(times))
        a, b, share = self.took[:, 0], self.took[:, 1], self.took[:, 2]
        t = times[:, None].astype(np.float64)
        inside = (t >= a) & (t < b)
        at = np.where(inside, share, -1.0).max(axis=1)
        distance = np.maximum(a - t, t - b)
        nearest = share[np.argmin(distance, axis=1)]
        return np.where(at >= 0, at, nearest)

    @property
    def source(self) -> tuple[str, ...]:
        """The senders, then the carriers named: what the finding names as its source."""
        return tuple(dict.fromkeys((*self.senders, *self.named)))


def foreign_traffic(ctx: Context) -> ForeignTraffic | None:
    """The foreign traffic of the run's replayed steps on the links its cross-node
    groups use; ``None`` without counters, without a replay or with none found."""
    return ctx.memo("foreign_intervals", lambda: _measure(ctx))


def _measure(ctx: Context) -> ForeignTraffic | None:
    mine = job_bytes(ctx)
    if mine is None:
        return None
    _, window = mine
    own = _own_curves(ctx)
    hosts = set(ctx.metrics.placement["node"].to_list())
    frames = [f for f in (_nic_intervals(ctx, window), _link_intervals(ctx, window, hosts)) if f]
    if not frames:
        return None
    # only intervals within the replayed steps: the job's bytes are known there alone
    # (a warm-up step's bytes in an interval half outside would read as foreign)
    rows = pl.concat([f for frame in frames for f in frame], how="vertical_relaxed").filter(
        pl.col("start_ns") >= window[0], pl.col("end_ns") <= window[1]
    )
    rows = _per_iteration(rows, window, ctx.iteration_ns)
    job = np.zeros(rows.height)
    for k, (below, a, b) in enumerate(rows.select("hosts", "start_ns", "end_ns").iter_rows()):
        job[k] = sum(_at(own[h], b) - _at(own[h], a) for h in below if h in own)
    rows = rows.with_columns(job=pl.Series(job)).with_columns(
        other=(pl.col("bytes") - pl.col("job")).clip(lower_bound=0.0),
        span_s=(pl.col("end_ns") - pl.col("start_ns")) / 1e9,
    )
    past_rate = pl.col("other") >= FOREIGN_RATE * pl.col("rate_bps") / 8 * pl.col("span_s")
    hot = rows.filter(
        pl.col("bytes") > 0, pl.col("other") >= FOREIGN_SHARE * pl.col("bytes"), past_rate
    )
    used = hot.filter(pl.col("used"))
    if used.height == 0:
        return None
    on_links = rows.filter(pl.col("used"))
    seen_raw = _merged(on_links.select("start_ns", "end_ns").to_numpy(), window)
    shares = used.group_by("carrier").agg(share=pl.col("other").sum() / pl.col("bytes").sum())
    intervals = _merged(used.select("start_ns", "end_ns").to_numpy(), window)
    intervals, observed = _to_edges(intervals, seen_raw, window)
    unclear = _merged(on_links.filter(past_rate).select("start_ns", "end_ns").to_numpy(), window)
    unclear, _ = _to_edges(unclear, seen_raw, window)
    sending = hot.filter(pl.col("sender").is_not_null())
    senders = sending.group_by("sender").agg(pl.col("other").sum()).sort("other", descending=True)
    seen = float((observed[:, 1] - observed[:, 0]).sum())
    covered = float((intervals[:, 1] - intervals[:, 0]).sum()) / max(seen, 1.0)
    # sorted: the rows come out of a group-by in no set order, and the nearest span of a
    # time between two is the first of them
    took = (
        used.select(
            "start_ns",
            "end_ns",
            share=pl.col("other") / (pl.col("rate_bps") / 8 * pl.col("span_s")),
        )
        .sort("start_ns", "end_ns", "share")
        .to_numpy()
    )
    return ForeignTraffic(
        {c: round(s, 4) for c, s in sorted(shares.iter_rows())},
        tuple(senders["sender"].to_list()),
        tuple(sorted(set(used.filter(~pl.col("receiving"))["carrier"].to_list()))),
        intervals,
        round(covered, 4),
        observed,
        took.astype(np.float64),
        unclear,
    )


#: A host's own bytes as a cumulative curve: sorted starts with the running sums of
#: rate and rate x start, and the same for the ends.
Curve = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


#: Ops whose every rank sends all its bus bytes to the next rank of the group's ring
#: (a broadcast's or reduce's ring is a chain: its last rank sends nothing on;
#: ``nominal.RING_OPS`` holds those too, as it counts the busiest edge, not every rank).
EVERY_RANK_SENDS = frozenset({"all_reduce", "all_gather", "reduce_scatter"})


def _leaves_host(ctx: Context, groups: list[str], node: dict[int, str]) -> np.ndarray:
    """(group index, rank): whether the rank's successor in the group's ring is on
    another host (``node``: each placed rank's host; ``True`` where the group's ranks
    are not all placed: an upper bound)."""
    world = max([ctx.metrics.world_size, *(r + 1 for r in node)])
    out = np.ones((len(groups), world), dtype=bool)
    for g, name in enumerate(groups):
        ranks = ctx.metrics.group_ranks.get(name)
        if not ranks or any(r not in node for r in ranks):
            continue
        out[g, :] = False
        for r, after in zip(ranks, (*ranks[1:], ranks[0]), strict=True):
            out[g, r] = node[r] != node[after]
    return out


def _own_curves(ctx: Context) -> dict[str, Curve]:
    """Per host: what its ranks posted, each collective's bytes x bus factor spread
    evenly over its transfer, as a curve :func:`_at` reads at any time. Of a ring op,
    only a rank whose successor in the group is on another host sends across the
    host's link (a ring leaves a host as often as it enters it: the same count holds
    for what the host receives)."""
    prog = ctx.program
    inst = ctx.metrics.instances
    if prog is None or inst.height == 0:
        return {}
    node = ctx.metrics.node_of()
    groups = inst["group"].cast(pl.String).to_list()
    names = sorted(set(groups))
    leaves = _leaves_host(ctx, names, node)
    index = {name: k for k, name in enumerate(names)}
    group_of = np.array([index[g] for g in groups], dtype=np.int64)
    ring = np.array([op in EVERY_RANK_SENDS for op in inst["op"].to_list()])
    factor = np.array(
        [
            bus_factor(op, int(n)) or 0.0
            for op, n in zip(inst["op"], inst["group_size"], strict=True)
        ]
    )
    moved = inst["bytes"].to_numpy().astype(np.float64) * factor
    start = inst["last_enter"].fill_null(-1).to_numpy().astype(np.float64)
    end = inst["exit"].fill_null(-1).to_numpy().astype(np.float64)
    posts = (prog.kind == POST) & (prog.inst >= 0)
    ranks, ids = prog.rank[posts], prog.inst[posts]
    crosses = ~ring[ids] | leaves[group_of[ids], np.clip(ranks, 0, leaves.shape[1] - 1)]
    ranks, ids = ranks[crosses], ids[crosses]
    out: dict[str, Curve] = {}
    for host in sorted(set(node.values())):
        mine = ids[np.isin(ranks, [r for r, h in node.items() if h == host])]
        s, e = start[mine], end[mine]
        ok = (s >= 0) & (e > s)
        s, e, r = s[ok], e[ok], moved[mine][ok] / (e[ok] - s[ok])
        a, b = np.argsort(s), np.argsort(e)
        out[host] = (
            s[a],
            np.cumsum(r[a]),
            np.cumsum(r[a] * s[a]),
            e[b],
            np.cumsum(r[b]),
            np.cumsum(r[b] * e[b]),
        )
    return out


def _at(curve: Curve, t: float) -> float:
    """The host's own bytes moved by time ``t``: sum of rate x (min(t, end) - start)
    over the transfers begun by then."""
    s, rs, rss, e, re, ree = curve
    i = int(np.searchsorted(s, t, side="right"))
    j = int(np.searchsorted(e, t, side="right"))
    begun = t * rs[i - 1] - rss[i - 1] if i else 0.0
    ended = t * re[j - 1] - ree[j - 1] if j else 0.0
    return float(begun - ended)


_COLUMNS = {
    "carrier": pl.String,
    "direction": pl.String,
    "hosts": pl.List(pl.String),
    "used": pl.Boolean,
    "sender": pl.String,
    "receiving": pl.Boolean,
    "rate_bps": pl.Float64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "bytes": pl.Float64,
}


def _nic_intervals(ctx: Context, window: tuple[int, int]) -> list[pl.DataFrame]:
    """Each host's NIC windows (each direction's bytes, every NIC of the host summed)
    as carriers named by the host. A NIC that declares no speed (a veth of the
    emulated fabric) is held to its host's link as the fabric's counters set it."""
    hosts = ctx.metrics.hosts
    if hosts is None or hosts.windows.height == 0 or hosts.nic.height == 0:
        return []
    # the rates set within the window (a fault's change in force), else over the run
    fabric = host_link_rates(ctx.metrics.run, window) or host_link_rates(ctx.metrics.run, None)
    declared = pl.col("link_rate_bps").cast(pl.Float64)
    rates = hosts.nic.select("host", "device", "direction", "link_rate_bps").with_columns(
        link_rate_bps=pl.when(declared > 0)
        .then(declared)
        .otherwise(pl.col("host").replace_strict(fabric, default=None, return_dtype=pl.Float64))
    )
    t0, t1 = window
    span_s = (pl.col("end_ns") - pl.col("start_ns")) / 1e9
    counted = (
        pl.col("bytes")
        if "bytes" in hosts.windows.columns
        else pl.col("util") * pl.col("link_rate_bps") / 8 * span_s
    )
    w = (
        hosts.windows.filter(
            pl.col("device") != "lo", pl.col("end_ns") > t0, pl.col("start_ns") < t1
        )
        .join(rates, on=["host", "device", "direction"], how="inner")
        .with_columns(bytes=counted)
        .filter(pl.col("bytes").is_not_nan(), pl.col("link_rate_bps") > 0)
    )
    if w.height == 0:
        return []
    # each direction on its own: the busier of two in each window would be biased up
    per = w.group_by("host", "direction", "start_ns", "end_ns").agg(
        pl.col("bytes").sum(), rate_bps=pl.col("link_rate_bps").sum()
    )
    return [
        per.select(
            carrier=pl.col("host"),
            direction=pl.col("direction"),
            hosts=pl.concat_list(pl.col("host")),
            used=pl.lit(True),
            sender=pl.when(pl.col("direction") == "tx").then(pl.col("host")),
            receiving=pl.col("direction") == "rx",
            rate_bps=pl.col("rate_bps").cast(pl.Float64),
            start_ns=pl.col("start_ns").cast(pl.Int64),
            end_ns=pl.col("end_ns").cast(pl.Int64),
            bytes=pl.col("bytes").cast(pl.Float64),
        )
    ]


def _link_intervals(
    ctx: Context, window: tuple[int, int], job_hosts: set[str]
) -> list[pl.DataFrame]:
    """The fabric's link directions as carriers: a host link holds its host's own
    bytes (used when the host is the job's; its sending direction names a sender),
    a switch link those of the hosts below either end (used next to a job host's
    switch)."""
    loads = link_intervals(ctx.metrics.run, window)
    if loads is None or loads.height == 0:
        return []
    loads = loads.filter(pl.col("rate_bps") > 0)
    own = host_ends(loads.select("kind", "src", "dst").unique().iter_rows())
    switch_of = {
        (a if a in own else b): (b if a in own else a)
        for a, b in loads.filter(pl.col("kind") == "host").select("src", "dst").iter_rows()
    }
    below: dict[str, list[str]] = {}
    for host, switch in switch_of.items():
        if host in job_hosts:
            below.setdefault(switch, []).append(host)
    rows = []
    for _, kind, src, dst, rate, start, end, nbytes in loads.iter_rows():
        if kind == "host":
            host = src if src in switch_of else dst
            hosts, used = [host], host in job_hosts
            sender = host if host == src else None
            receiving = host == dst
        else:
            hosts = [*below.get(src, []), *below.get(dst, [])]
            used, sender, receiving = bool(hosts), None, False
        rows.append(
            (link_name(kind, src, dst), "", hosts, used, sender, receiving, float(rate), start)
            + (end, nbytes)
        )
    return [pl.DataFrame(rows, schema=_COLUMNS, orient="row")]


#: Iterations joined into one span of counters at least: the job's bytes come in bursts
#: an even spread does not follow, and a host sampler starved of CPU reads its counters
#: late (gaps of half a second on a loaded 2-core machine, its windows interpolated
#: across them): a span of one iteration then reads the job's own burst as foreign.
SPAN_ITERATIONS = 3


def _per_iteration(
    rows: pl.DataFrame, window: tuple[int, int], iteration_ns: float
) -> pl.DataFrame:
    """Each carrier's intervals joined into spans of at least ``SPAN_ITERATIONS``
    iterations: within one the job's bytes come in bursts (a ring's steps, buckets)
    that an even spread over each transfer does not follow, which a short interval
    would read as foreign. What the window leaves after its last whole span joins
    that span (a quarter-span tail once read 27 % of a host link's bytes as foreign)."""
    t0, t1 = window
    width = max(int(SPAN_ITERATIONS * iteration_ns), 1)
    last = max((t1 - t0) // width, 1) - 1
    keys = ["carrier", "direction", "used", "sender", "receiving"]
    return (
        rows.with_columns(bin=((pl.col("start_ns") - t0) // width).clip(upper_bound=last))
        .group_by([*keys, "bin"])
        .agg(
            pl.col("hosts").first(),
            pl.col("rate_bps").max(),
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
            pl.col("bytes").sum(),
        )
        .drop("bin")
    )


def _to_edges(
    intervals: np.ndarray, observed: np.ndarray, window: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """The first and last intervals the counters saw stand for the replayed window's
    edges before and after them (no sample falls wholly within those edges)."""
    intervals, observed = intervals.copy(), observed.copy()
    if len(intervals) and intervals[0, 0] == observed[0, 0]:
        intervals[0, 0] = window[0]
    if len(intervals) and intervals[-1, 1] == observed[-1, 1]:
        intervals[-1, 1] = window[1]
    observed[0, 0], observed[-1, 1] = window[0], window[1]
    return intervals, observed


def _within(spans: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Per time: whether it falls in one of the sorted, disjoint ``spans``."""
    k = np.searchsorted(spans[:, 0], times, side="right") - 1
    return (k >= 0) & (times < spans[np.clip(k, 0, None), 1])


def _merged(spans: np.ndarray, window: tuple[int, int]) -> np.ndarray:
    """The union of ``spans`` (start, end) within ``window``, sorted and disjoint."""
    spans = np.clip(spans, window[0], window[1])
    spans = spans[np.argsort(spans[:, 0], kind="stable")]
    out: list[list[int]] = []
    for a, b in spans.tolist():
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        elif b > a:
            out.append([a, b])
    return np.array(out, dtype=np.int64).reshape(-1, 2)


#: The most of a link's rate foreign traffic is taken to leave the job none of: past it
#: a call's bytes at the rate left would take without bound.
MOST_TAKEN = 0.9


def _at_capacity(ctx: Context, rate: nominal.Nominal, inside: pl.DataFrame) -> np.ndarray:
    """Per transfer of ``inside`` (foreign traffic all run long): its time at the links'
    capacity. At or past the latency knee, or where its bytes take at least the known
    latency at that rate, the latency plus its bytes' time; below, where a latency the
    capacity does not know is part of its time, its time less what the foreign bytes
    took from its bytes: at the share ``f`` of the rate they took, its bytes' time at
    the rate left (``1 / (1 - f)`` of it) against at the whole rate."""
    prog = ctx.program
    assert prog is not None
    volume = nominal.volume_ns(ctx, prog, rate)
    ids = inside["_id"].to_numpy()
    at = rate.alpha_ns + volume[ids]
    bulk = (inside["bytes"].to_numpy() >= ctx.thresholds.latency_knee_bytes) | (
        (rate.alpha_ns > 0) & (volume[ids] >= rate.alpha_ns)
    )
    mid = ((inside["last_enter"] + inside["exit"]) // 2).to_numpy()
    taken = np.clip(foreign_traffic(ctx).rate_share(mid), 0.0, MOST_TAKEN)  # type: ignore[union-attr]
    left = inside["alone_ns"].to_numpy() - volume[ids] * taken / (1 - taken)
    return np.where(bulk, at, np.fmax(at, left))


#: Transfers of a class outside the foreign intervals needed to be its baseline.
CLEAN_MIN = 3


@dataclass(frozen=True)
class Beside:
    """The job's cross-node transfers in the foreign intervals: ``slower``, their
    median time alone over the baseline; ``baseline`` in words; per instance (row of
    the run's instances) whether it is one of them (``which``) and its time alone at
    the baseline (``target_ns``, nan where none)."""

    traffic: ForeignTraffic
    slower: float
    baseline: str
    count: int
    which: np.ndarray
    target_ns: np.ndarray


def slower_beside(ctx: Context, suspect: pl.DataFrame) -> Beside | None:
    """``suspect``: the cross-node transfers of any size (``_id``: their instance row,
    ``alone_ns``, ``op``, ``n``, ``bytes``, ``size_class``, ``last_enter``, ``exit``).
    ``None`` without foreign traffic, with fewer than ``CLEAN_MIN`` transfers in it or
    no baseline for them."""
    found = foreign_traffic(ctx)
    prog = ctx.program
    if found is None or prog is None or suspect.height == 0:
        return None
    mid = ((suspect["last_enter"] + suspect["exit"]) // 2).to_numpy()
    frame = suspect.with_columns(
        inside=pl.Series(found.beside(mid)), outside=pl.Series(found.clean(mid))
    )
    if int(frame["inside"].sum()) < CLEAN_MIN:
        return None
    keys = ["op", "n", "size_class"]
    clean = (
        frame.filter(pl.col("outside"))
        .group_by(keys)
        .agg(clean_ns=pl.col("alone_ns").median(), clean_n=pl.len())
        .filter(pl.col("clean_n") >= CLEAN_MIN)
    )
    inside = frame.filter(pl.col("inside")).join(clean, on=keys, how="left")
    rate = nominal.nominal(ctx)
    words = "their own pace outside those intervals"
    if inside["clean_ns"].null_count() > inside.height // 2:
        if rate is None:
            return None  # other traffic all run long, and nothing to measure it against
        inside = inside.with_columns(clean_ns=pl.Series(_at_capacity(ctx, rate, inside)))
        words = f"{rate.words}"
    inside = inside.filter(pl.col("clean_ns").is_not_null(), pl.col("clean_ns").is_not_nan())
    if inside.height < CLEAN_MIN:
        return None
    ratio = (inside["alone_ns"] / inside["clean_ns"]).median()
    n = ctx.metrics.instances.height
    which, target = np.zeros(n, dtype=bool), np.full(n, np.nan)
    ids = inside["_id"].to_numpy()
    which[ids] = True
    target[ids] = inside["clean_ns"].to_numpy()
    return Beside(found, float(ratio), words, inside.height, which, target)  # type: ignore[arg-type]
