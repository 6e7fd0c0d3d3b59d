"""Figures the physics forbids, flagged as unmeasurable with the reason.

A measurement can produce a value no real transfer can have: a collective's bus
bandwidth above the rate of every host link it crosses (its service time, taken between
two ranks' clocks, came out too short), a service time shorter than the uncertainty of
the clocks it is measured on, a NIC above its own link rate (the counters were sampled
at uneven times). Such a value is not a slow or a fast measurement but no measurement:
its instance keeps its row, its ``busbw_gbps`` and ``algbw_gbps`` become null and its
``unmeasurable`` column says why, so no plot, table or detector uses it; the run's
:class:`Unmeasurable` records say how many were left out and why (the report's figure
notes and ``diagnose --json`` carry them).

The link rate is a physical one, never a measured best: the host links of the emulated
fabric (``fabric-links.arrow``) or the NICs' own rates (the hosts' counters). Only a
collective whose group spans hosts is held to it; within a host the NIC is not crossed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

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
    """The fastest host link's rate: from the fabric's link counters in ``run_dir``,
    else from the NICs' own rates in the hosts' counters (``nic``); ``None`` when
    neither says. The fastest, so that no collective is held to a link it need not
    cross."""
    path = run_dir / LINKS_FILE
    if path.is_file():
        try:
            links = pl.read_ipc_stream(path, columns=["kind", "rate_bps"])
            rate = links.filter(pl.col("kind") == "host", pl.col("rate_bps") > 0)["rate_bps"].max()
        except Exception:  # a damaged counters file is no rate, never a failed analysis
            rate = None
        if isinstance(rate, (int, float)) and rate > 0:
            return LinkRate(float(rate) / 8e9, f"the fabric's host links, {LINKS_FILE}")
    if nic is not None and nic.height and "link_rate_bps" in nic.columns:
        rate = nic["link_rate_bps"].max()
        if isinstance(rate, (int, float)) and rate > 0:
            return LinkRate(float(rate) / 8e9, "the NICs' own rate, host counters")
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
        spans = pl.col("group").replace_strict(group_nodes, default=1, return_dtype=pl.Int64)
        fast = measured & (spans > 1) & (pl.col("busbw_gbps") > link.gbps)
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
                f"busbw above the {_rate(link.gbps)} link rate ({link.source}): a service "
                "time too short to be real",
            )
        )
    return out, notes


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


def _rate(gbps: float) -> str:
    bits = gbps * 8e9
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6)):
        if bits >= scale:
            return f"{bits / scale:.3g} {unit}"
    return f"{bits / 1e3:.3g} kbit/s"
