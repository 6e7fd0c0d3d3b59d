"""Figures the physics forbids, flagged as unmeasurable with the reason.

A measurement can produce a value no real transfer can have: a collective faster than
its hosts' links allow (its service time, taken between two ranks' clocks, came out too
short), a service time shorter than the uncertainty of
the clocks it is measured on, a NIC above its own link rate (the counters were sampled
at uneven times). Such a value is not a slow or a fast measurement but no measurement:
its instance keeps its row, its ``busbw_gbps`` and ``algbw_gbps`` become null and its
``unmeasurable`` column says why, so no plot, table or detector uses it; the run's
:class:`Unmeasurable` records say how many were left out and why (the report's figure
notes and ``diagnose --json`` carry them).

The link rate is a physical one, never a measured best: a host's links of the emulated
fabric (``fabric-links.arrow``) or the sum of its NICs' own rates (the hosts' counters),
the largest over the hosts. A collective is held to it at the level of hosts: over H
hosts an all-reduce must move 2(H-1)/H of its bytes through each host's links (nccl-tests'
factor with H for the ranks), whatever runs inside a host (NVLink, shared memory); so
``algbw`` × factor(op, H) may not exceed the rate. With one rank per host that is the
busbw itself; within one host nothing is held to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from syncpace.analysis.links import links_files
from syncpace.trace.busbw import FACTORS
from syncpace.trace.schema import LINKS_FILE

BUSBW = "busbw above the link rate"
CLOCK = "service time shorter than the clock uncertainty"
NIC = "NIC utilisation above its link rate"


@dataclass(frozen=True)
class LinkRate:
    """The fastest host link of a run (GB/s, bytes/ns) and where that rate was read."""

    gbps: float
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"gbps": self.gbps, "source": self.source}


@dataclass(frozen=True)
class Unmeasurable:
    """``count`` of ``total`` values of ``what`` left out; ``reason`` says why in words."""

    what: str
    count: int
    total: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "count": self.count, "of": self.total, "reason": self.reason}


def link_rate(run_dir: Path, nic: pl.DataFrame | None) -> LinkRate | None:
    """The largest rate a host can send at: its fabric link from the fabric's link
    counters in ``run_dir`` (one per host), else the sum of its NICs' own rates in the
    hosts' counters (``nic``); ``None`` when neither says. The largest over the hosts,
    so that no collective is held to a link it need not cross."""
    for path in links_files(run_dir):
        try:
            links = pl.read_ipc_stream(path, columns=["kind", "rate_bps"])
            rate = links.filter(pl.col("kind") == "host", pl.col("rate_bps") > 0)["rate_bps"].max()
        except Exception:  # a damaged counters file is no rate, never a failed analysis
            rate = None
        if isinstance(rate, (int, float)) and rate > 0:
            return LinkRate(float(rate) / 8e9, f"the fabric's host links, {LINKS_FILE}")
    if nic is not None and nic.height and "link_rate_bps" in nic.columns:
        per_host = (
            nic.filter(pl.col("direction") == "tx", pl.col("link_rate_bps") > 0)
            .group_by("host")
            .agg(pl.col("link_rate_bps").sum())
        )
        rate = per_host["link_rate_bps"].max() if per_host.height else None
        if isinstance(rate, (int, float)) and rate > 0:
            return LinkRate(float(rate) / 8e9, "a host's NICs together, host counters")
    return None


def flag_instances(
    inst: pl.DataFrame,
    *,
    uncertainty_ns: int | None,
    link: LinkRate | None,
    group_nodes: dict[str, int],
) -> tuple[pl.DataFrame, list[Unmeasurable]]:
    """``inst`` with an ``unmeasurable`` column (the reason, or null) and no bandwidth
    where it is set, and what was left out. The clock rule comes first: a service time
    the clocks cannot resolve gives no bandwidth to compare with the link."""
    if inst.height == 0 or "busbw_gbps" not in inst.columns:
        return inst.with_columns(unmeasurable=pl.lit(None, pl.String)), []
    measured = pl.col("busbw_gbps").is_not_null()
    short = pl.lit(False)
    if uncertainty_ns:
        short = measured & (pl.col("service_ns") < uncertainty_ns)
    fast = pl.lit(False)
    if link is not None:
        hosts = pl.col("group").replace_strict(group_nodes, default=1, return_dtype=pl.Int64)
        fast = measured & (hosts > 1) & (pl.col("algbw_gbps") * _factor(hosts) > link.gbps)
    reason = pl.when(short).then(pl.lit(CLOCK)).when(fast).then(pl.lit(BUSBW))
    flagged = inst.with_columns(unmeasurable=reason.otherwise(pl.lit(None, pl.String)))
    out = flagged.with_columns(
        pl.when(pl.col("unmeasurable").is_null()).then(pl.col(c)).alias(c)
        for c in ("algbw_gbps", "busbw_gbps")
    )
    total = int(inst.select(measured.sum()).item())
    counts = flagged["unmeasurable"].value_counts()
    found = dict(zip(counts["unmeasurable"].to_list(), counts["count"].to_list(), strict=True))
    notes = []
    if found.get(CLOCK):
        notes.append(
            Unmeasurable(
                "busbw",
                found[CLOCK],
                total,
                f"{CLOCK} ({uncertainty_ns / 1e3:.3g} µs): the clocks cannot resolve it",
            )
        )
    if found.get(BUSBW) and link is not None:
        notes.append(
            Unmeasurable(
                "busbw",
                found[BUSBW],
                total,
                f"faster than the {rate_words(link.gbps)} host link rate allows ({link.source}):"
                " a service time too short to be real",
            )
        )
    return out, notes


def _factor(hosts: pl.Expr) -> pl.Expr:
    """nccl-tests' bus factor of each instance's op over its ``hosts``."""
    h = hosts.cast(pl.Float64)
    a = pl.col("op").replace_strict({k: v[0] for k, v in FACTORS.items()}, default=None)
    b = pl.col("op").replace_strict({k: v[1] for k, v in FACTORS.items()}, default=None)
    return a.cast(pl.Float64) * (h - 1) / h + b.cast(pl.Float64)


def nic_notes(nic: pl.DataFrame | None) -> list[Unmeasurable]:
    """The NIC windows left out for a utilisation above the link rate (the hosts'
    counters mark them, :mod:`syncpace.analysis.hostcounters`)."""
    if nic is None or nic.height == 0 or "util_unmeasurable_windows" not in nic.columns:
        return []
    count = int(nic["util_unmeasurable_windows"].sum())
    total = int(nic["util_windows"].sum()) if "util_windows" in nic.columns else count
    if not count:
        return []
    return [
        Unmeasurable(
            "nic_utilisation",
            count,
            total,
            f"{NIC}: the counters were read at uneven times, the window cannot be resolved",
        )
    ]


def rate_words(gbps: float) -> str:
    """A rate of ``gbps`` bytes/ns as links are spoken of: '100 Mbit/s', '9.6 Gbit/s'."""
    bits = gbps * 8e9
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6)):
        if bits >= scale:
            return f"{bits / scale:.3g} {unit}"
    return f"{bits / 1e3:.3g} kbit/s"
