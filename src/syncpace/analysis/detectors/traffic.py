"""Whose traffic is on the links: the job's own bytes per host against what the NIC
and the fabric's link counters saw, the hosts and links that carry other traffic, and
the host whose sending fills a shared link: the measurements behind contention's
source and its "never the job's own" rule (:mod:`syncpace.analysis.detectors.network`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from syncpace.analysis.detectors.context import Context
from syncpace.analysis.links import (
    LinkLoad,
    busiest_links,
    host_ends,
    link_bytes,
    link_name,
    run_window,
)
from syncpace.trace.busbw import bus_factor

#: Other traffic on a host's link: NIC bytes beyond the job's own, as a share of them.
FOREIGN_SHARE = 0.2
#: ... and as a share of the link's rate over the replayed steps (idle links aside).
FOREIGN_RATE = 0.1


def job_bytes(ctx: Context) -> tuple[dict[str, float], tuple[int, int]] | None:
    """Per host, what the job's ranks there posted during the replayed steps, each
    collective's bytes times its bus factor: an upper bound of what the job put on the
    host's link (traffic between ranks of one host never leaves it); and that window
    (ns). ``None`` without a replay."""

    def compute() -> tuple[dict[str, float], tuple[int, int]] | None:
        prog = ctx.program
        if prog is None:
            return None
        replayed = ctx.metrics.rank_steps.filter(pl.col("step").is_in(prog.steps.tolist()))
        if replayed.height == 0:
            return None
        t0 = int(replayed["start_ns"].min())  # type: ignore[arg-type]
        t1 = int(replayed["end_ns"].max())  # type: ignore[arg-type]
        inst = ctx.metrics.instances
        factor = np.array(
            [
                bus_factor(op, int(n)) or 0.0
                for op, n in zip(inst["op"], inst["group_size"], strict=True)
            ]
        )
        moved = inst["bytes"].to_numpy().astype(np.float64) * factor
        posts = (prog.kind == 0) & (prog.inst >= 0)  # POST
        per_rank = np.bincount(prog.rank[posts], weights=moved[prog.inst[posts]])
        node = ctx.metrics.node_of()
        job: dict[str, float] = {}
        for rank, b in enumerate(per_rank):
            if rank in node:
                job[node[rank]] = job.get(node[rank], 0.0) + float(b)
        return job, (t0, t1)

    return ctx.memo("job_bytes", compute)


#: Counters cover a host when their samples span this share of the replayed steps.
COVERED = 0.5


def foreign_traffic(ctx: Context) -> dict[str, float]:
    """Per host with NIC counters: the share of its NIC's bytes during the replayed
    steps (the busier direction) that the job's collectives do not account for
    (:func:`job_bytes`) — other flows on the host's link; a lower bound. Only hosts
    whose other traffic also reaches ``FOREIGN_RATE`` of the link rate are kept. Empty
    without host counters or a replay."""
    return nic_traffic(ctx)[0]


def nic_traffic(ctx: Context) -> tuple[dict[str, float], frozenset[str]]:
    """:func:`foreign_traffic`, and the hosts whose NIC counters span ``COVERED`` of
    the replayed steps."""
    foreign, covered, _ = _nic_foreign(ctx)
    return foreign, covered


def nic_senders(ctx: Context, hosts: list[str] | None = None) -> list[str]:
    """Of :func:`contended_hosts`, those whose NICs *send* the other traffic: where it
    comes from, not where it ends (a host receiving a flow carries it too)."""
    sending = _nic_foreign(ctx)[2]
    return [h for h in contended_hosts(ctx, hosts) if h in sending]


def _nic_foreign(ctx: Context) -> tuple[dict[str, float], frozenset[str], frozenset[str]]:
    """:func:`nic_traffic`, and the hosts whose other traffic is in their NICs' sending
    direction."""

    def compute() -> tuple[dict[str, float], frozenset[str], frozenset[str]]:
        hosts, mine = ctx.metrics.hosts, job_bytes(ctx)
        none: tuple[dict[str, float], frozenset[str], frozenset[str]] = (
            {},
            frozenset(),
            frozenset(),
        )
        if mine is None or hosts is None or hosts.windows.height == 0 or hosts.nic.height == 0:
            return none
        job, (t0, t1) = mine
        rates = hosts.nic.select("host", "device", "direction", "link_rate_bps")
        w = hosts.windows.filter(
            pl.col("device") != "lo", pl.col("end_ns") > t0, pl.col("start_ns") < t1
        ).join(rates, on=["host", "device", "direction"], how="inner")
        if w.height == 0:
            return none
        overlap_s = (
            pl.min_horizontal("end_ns", pl.lit(t1)) - pl.max_horizontal("start_ns", pl.lit(t0))
        ) / 1e9
        # the bytes counted in each window, by the share of it inside the steps: a
        # utilisation times the NIC's last declared rate overstates them wherever the
        # rate changed during the run (a link set slower for a while: 9 times at 11 of
        # 100 Mbit/s, read as other traffic)
        inside = overlap_s / ((pl.col("end_ns") - pl.col("start_ns")) / 1e9)
        nic = (
            w.filter(pl.col("util").is_not_nan(), pl.col("link_rate_bps") > 0)
            .group_by("host", "direction")
            .agg(
                bytes=(pl.col("bytes") * inside).sum(),
                rate=pl.col("link_rate_bps").max() / 8,
                covered=overlap_s.max(),
            )
        )
        span = (t1 - t0) / 1e9
        # windows of one NIC do not overlap; several NICs per host: the best covered
        covered = frozenset(
            nic.group_by("host", "direction")
            .agg(pl.col("covered").sum())
            .filter(pl.col("covered") >= COVERED * span)["host"]
            .to_list()
        )
        out: dict[str, float] = {}
        sending: set[str] = set()
        for host, direction, nbytes, rate, _ in nic.iter_rows():
            other = nbytes - job.get(host, 0.0)
            if nbytes <= 0 or other < FOREIGN_RATE * rate * span:
                continue
            out[host] = max(out.get(host, 0.0), other / nbytes)
            if direction == "tx" and other >= FOREIGN_SHARE * nbytes:
                sending.add(host)
        return {h: round(v, 4) for h, v in sorted(out.items())}, covered, frozenset(sending)

    return ctx.memo("nic_traffic", compute)


@dataclass(frozen=True)
class LinkTraffic:
    """What the fabric's host links carried beside the job's own bytes: per host link
    direction (its one name) the share that is not the job's, where that reaches
    ``FOREIGN_SHARE`` of its bytes and ``FOREIGN_RATE`` of its rate; of those, the
    directions leaving a host (``sending``: where the bytes come from) and their hosts
    (``senders``); the hosts the counters cover."""

    foreign: dict[str, float]
    senders: tuple[str, ...]
    sending: tuple[str, ...]
    covered: frozenset[str]


def link_traffic(ctx: Context) -> LinkTraffic | None:
    """From the run directory's link counters (the emulated fabric's), over the
    replayed steps: each host link direction's bytes against the job's bytes of its
    host (:func:`job_bytes`; a host sends and receives what its ranks post). ``None``
    without link counters or a replay."""

    def compute() -> LinkTraffic | None:
        mine = job_bytes(ctx)
        if mine is None:
            return None
        job, (t0, t1) = mine
        loads = link_bytes(ctx.metrics.run, (t0, t1))
        if loads is None or loads.height == 0:
            return None
        span_ns = t1 - t0
        own = host_ends(loads.select("kind", "src", "dst").unique().iter_rows())
        hosts = loads.filter(pl.col("kind") == "host", pl.col("rate_bps") > 0)
        span = (t1 - t0) / 1e9
        foreign: dict[str, float] = {}
        senders: list[tuple[str, str]] = []
        for row in hosts.iter_rows(named=True):
            host = row["src"] if row["src"] in own else row["dst"]
            other = row["bytes"] - job.get(host, 0.0)
            if row["bytes"] <= 0 or other < FOREIGN_RATE * row["rate_bps"] / 8 * span:
                continue
            if other / row["bytes"] < FOREIGN_SHARE:
                continue
            name = link_name(row["kind"], row["src"], row["dst"])
            foreign[name] = round(other / row["bytes"], 4)
            if host == row["src"]:
                senders.append((host, name))
        spanned = hosts.filter(pl.col("covered_ns") >= COVERED * span_ns)
        seen = {*spanned["src"].to_list(), *spanned["dst"].to_list()}
        covered = frozenset(h for h in own if h in seen)
        hosts_sending = tuple(dict.fromkeys(h for h, _ in senders))
        return LinkTraffic(foreign, hosts_sending, tuple(n for _, n in senders), covered)

    return ctx.memo("link_traffic", compute)


def own_traffic_only(ctx: Context, hosts: Sequence[str]) -> bool:
    """Whether counters cover every one of ``hosts`` (their samples span ``COVERED`` of
    the replayed steps) and show nothing on their links but the job's own bytes (the
    link counters: on any host link of the fabric; the NIC counters: on these hosts').
    Transfers slower than the run's best are then the
    job's own calls sharing the links — several collectives in flight together, each
    at its share of the rate — which is bandwidth, not contention."""
    if not hosts:
        return False
    links = link_traffic(ctx)
    foreign, nic_covered = nic_traffic(ctx)
    by_links = links is not None and set(hosts) <= links.covered
    by_nic = set(hosts) <= nic_covered
    if not (by_links or by_nic):
        return False
    if links is not None and links.foreign:
        return False
    return not any(share >= FOREIGN_SHARE for share in foreign.values())


def contended_hosts(ctx: Context, hosts: list[str] | None = None) -> list[str]:
    """Hosts (of ``hosts``, else all) whose links carry other traffic beside the
    job's: at least ``FOREIGN_SHARE`` of their NIC bytes."""
    found = [h for h, share in foreign_traffic(ctx).items() if share >= FOREIGN_SHARE]
    return [h for h in found if hosts is None or h in hosts]


#: A link direction is busy at this mean utilisation over the run's iterations.
BUSY_LINK = 0.5
#: A host sends beyond the job's own traffic when its link's sending direction is
#: busy and this many times the median host's.
SENDER_FACTOR = 2.0


@dataclass(frozen=True)
class LinkSource:
    """What the link counters say causes contention: hosts sending beyond the job's
    traffic (their own links' sending directions) and the busy shared links."""

    hosts: tuple[str, ...]
    sending: tuple[LinkLoad, ...]
    shared: tuple[LinkLoad, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.hosts, *(x.name for x in self.sending), *(x.name for x in self.shared))

    def text(self) -> str:
        """'h3 sends at 99% of host link h3→leaf1; its traffic crosses uplink
        leaf1→spine, uplink spine→leaf0, 99% busy each'."""
        shared = _loads(self.shared)
        if not self.hosts:
            return shared
        sends = ", ".join(f"{x.src} sends at {x.util:.0%} of {x.name}" for x in self.sending)
        whose = "its" if len(self.hosts) == 1 else "their"
        return f"{sends}; {whose} traffic crosses {shared}" if shared else sends

    def evidence(self) -> dict[str, Any]:
        loads = (*self.sending, *self.shared)
        return {
            "source_hosts": list(self.hosts),
            "link_utilisation_share": {x.name: round(x.util, 4) for x in loads},
            "link_rate_bps": {x.name: x.rate_bps for x in loads},
        }


def _loads(loads: tuple[LinkLoad, ...]) -> str:
    """'uplink leaf1→spine, uplink spine→leaf0, 99% busy each'."""
    utils = {f"{x.util:.0%}" for x in loads}
    if len(utils) == 1:
        each = " each" if len(loads) > 1 else ""
        return f"{', '.join(x.name for x in loads)}, {utils.pop()} busy{each}"
    return ", ".join(f"{x.name} {x.util:.0%} busy" for x in loads)


def link_source(ctx: Context) -> LinkSource | None:
    """From the run directory's link counters (the emulated fabric's), over the run's
    iterations: the hosts whose own link's sending direction is busy and
    ``SENDER_FACTOR`` times the median host's (the job's ranks send alike; a host that
    sends more carries other traffic), and the busy shared links. ``None`` without link
    counters or a busy link."""

    def compute() -> LinkSource | None:
        window = run_window(ctx.metrics.rank_steps)
        loads = busiest_links(ctx.metrics.run, window, top=None, min_util=0.0)
        own = host_ends((x.kind, x.src, x.dst) for x in loads)
        sending = [x for x in loads if x.kind == "host" and x.src in own]
        usual = float(np.median([x.util for x in sending])) if sending else 0.0
        senders = tuple(
            x for x in sending if x.util >= BUSY_LINK and x.util >= SENDER_FACTOR * usual
        )
        shared = tuple(x for x in loads if x.kind != "host" and x.util >= BUSY_LINK)[:3]
        if not senders and not shared:
            return None
        return LinkSource(tuple(dict.fromkeys(x.src for x in senders)), senders, shared)

    return ctx.memo("link_source", compute)
