"""What ``syncpace trace-info`` reports about a trace: counts, bytes and clock quality."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from syncpace.trace import schema
from syncpace.trace.reader import Trace
from syncpace.trace.validate.completeness import completeness_lines


@dataclass(frozen=True)
class TraceSummary:
    path: str
    world_size: int
    ranks_present: list[int]
    missing_ranks: list[int]
    hosts: dict[str, list[int]]
    steps: int
    events: int
    events_per_op: dict[str, dict[str, int]]
    events_per_rank: dict[int, int]
    clock: dict[str, Any]
    unfinished_ranks: list[int]
    dropped_events: int
    pacing: dict[str, Any] | None
    warnings: list[str]
    #: Always-on mode: what rotation kept and removed over all ranks, else None.
    rotation: dict[str, Any] | None = None
    #: Per rank: events and steps declared, found, left out as invalid, dropped, cut.
    completeness: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: The same as lines every verb prints (the whole trace, then each lossy rank).
    completeness_lines: list[str] = field(default_factory=list)
    #: The counters held beside the trace: the hosts' samplers and the emulated
    #: fabric's links; None when it holds neither.
    counters: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["events_per_rank"] = {str(k): v for k, v in self.events_per_rank.items()}
        data["completeness"] = {str(k): v for k, v in self.completeness.items()}
        return data


def summarize(trace: Trace) -> TraceSummary:
    events = trace.events
    per_op: dict[str, dict[str, int]] = {}
    if events.height:
        grouped = (
            events.group_by("op")
            .agg(pl.len().alias("count"), pl.col("bytes").sum().alias("bytes"))
            .sort("op")
        )
        per_op = {
            row["op"]: {"count": int(row["count"]), "bytes": int(row["bytes"])}
            for row in grouped.iter_rows(named=True)
        }
    per_rank = {r: 0 for r in trace.ranks}
    if events.height:
        for rank, count in events.group_by("rank").len().iter_rows():
            per_rank[int(rank)] = int(count)
    hosts: dict[str, list[int]] = {}
    for rank, meta in sorted(trace.meta.items()):
        hosts.setdefault(str(meta["host"]), []).append(rank)
    steps = int(trace.steps.group_by("rank").len()["len"].max() or 0) if trace.steps.height else 0
    pacing = pacing_summary(trace)
    return TraceSummary(
        path=str(trace.path),
        world_size=trace.world_size,
        ranks_present=trace.ranks,
        missing_ranks=trace.missing_ranks,
        hosts=hosts,
        steps=steps,
        events=events.height,
        events_per_op=per_op,
        events_per_rank=per_rank,
        clock=_clock_summary(trace),
        unfinished_ranks=[r for r, m in trace.meta.items() if not m.get("finished", False)],
        dropped_events=sum(int(m.get("dropped_events", 0) or 0) for m in trace.meta.values()),
        pacing=pacing,
        warnings=[*trace.warnings, *(pacing["warnings"] if pacing else [])],
        rotation=rotation_summary(trace),
        completeness={r: c.to_json() for r, c in sorted(trace.completeness.items())},
        counters=counters_summary(trace),
        completeness_lines=completeness_lines(
            trace.completeness, trace.missing_ranks, trace.world_size
        ),
    )


def _clock_summary(trace: Trace) -> dict[str, Any]:
    offsets, uncertainties, failed = {}, {}, []
    for rank, meta in trace.meta.items():
        clock = meta.get("clock") or {}
        if clock.get("uncertainty_ns") is None:
            if rank != 0:
                failed.append(rank)
            continue
        offsets[rank] = int(clock.get("offset_ns") or 0)
        uncertainties[rank] = int(clock["uncertainty_ns"])
    return {
        "max_abs_offset_ns": max((abs(v) for v in offsets.values()), default=0),
        "max_uncertainty_ns": max(uncertainties.values(), default=None),
        "unaligned_ranks": sorted(failed),
    }


def pacing_summary(trace: Trace) -> dict[str, Any] | None:
    """The pacer's account of the run: policy, how much it delayed, within what bound,
    and the A/B verdict. ``None`` when the run was not paced."""
    per_rank = [m["pacing"] for m in trace.meta.values() if isinstance(m.get("pacing"), dict)]
    if not per_rank:
        return None
    steps = trace.steps
    paced = int((steps["pacing_delay_ns"] > 0).sum()) if steps.height else 0
    first = per_rank[0]
    damaged: list[str] = []

    def number(section: Any, key: str, rank: int) -> float | None:
        # a damaged setting is left out with a warning; the account goes on without it
        value = section.get(key) if isinstance(section, dict) else None
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        damaged.append(
            f"rank {rank}: the pacing metadata's {key} is not a number "
            f"({str(value)[:40]!r}); left out of the pacing account"
        )
        return None

    ranks = [r for r, m in trace.meta.items() if isinstance(m.get("pacing"), dict)]
    delays = [number(p, "delay_max_s", r) for r, p in zip(ranks, per_rank, strict=True)]
    bounds = [
        number(p.get("policy_config"), "max_delay_s", r)
        for r, p in zip(ranks, per_rank, strict=True)
    ]
    policy = first.get("policy_config") if isinstance(first.get("policy_config"), dict) else {}
    controller = first.get("controller_config")
    controller = controller if isinstance(controller, dict) else {}
    ab = first.get("ab") if isinstance(first.get("ab"), dict) else {}
    return {
        "policy": first.get("policy"),
        "fraction_paced": paced / steps.height if steps.height else 0.0,
        "delay_sum_s": float(steps["pacing_delay_ns"].sum() or 0) / 1e9 if steps.height else 0.0,
        "delay_max_s": max((d for d in delays if d is not None), default=0.0),
        "bound_s": max((b for b in bounds if b is not None), default=0.0),
        "bound_fraction": number(policy, "max_delay_fraction", ranks[0]),
        "ab_state": first.get("ab_state"),
        "ab_confidence": number(ab, "confidence", ranks[0]),
        # the pacer's settings hold the A/B confidence; older traces had it with the controller
        "ab_required": number(policy, "ab_confidence", ranks[0])
        or number(controller, "ab_confidence", ranks[0]),
        "ab_throughput_gain": number(ab, "throughput_gain", ranks[0]),
        "enabled_ranks": sum(1 for p in per_rank if p.get("enabled")),
        "errors": sorted({str(p["error"]) for p in per_rank if p.get("error")}),
        "warnings": damaged,
    }


def counters_summary(trace: Trace) -> dict[str, Any] | None:
    """What counters the run directory holds beside the ranks' files: each sampling
    host's series (by source) over how long, and the fabric's link counters."""
    c = trace.counters
    links = (trace.path / schema.LINKS_FILE).is_file()
    if not c.height and not trace.hosts and not links:
        return None
    span = int(c["time_ns"].max() - c["time_ns"].min()) if c.height else 0  # type: ignore[operator]
    series = c.select("host", "source", "device", "port", "counter").n_unique() if c.height else 0
    return {
        "hosts": sorted(trace.hosts),
        "sources": sorted(set(c["source"].to_list())) if c.height else [],
        "series": series,
        "rows": c.height,
        "span_s": span / 1e9,
        "link_counters": schema.LINKS_FILE if links else None,
    }


def rotation_summary(trace: Trace) -> dict[str, Any] | None:
    """Always-on mode over all ranks: segments written and removed, events and bytes
    removed, pinned windows, summary rows; ``None`` for a run without rotation."""
    accounts = [m["segments"] for m in trace.meta.values() if m.get("segments")]
    if not accounts:
        return None
    first = accounts[0]
    return {
        "segment_s": first["segment_s"],
        "keep_s": first["keep_s"],
        "budget_bytes_per_rank": first["budget_bytes"],
        "segments_written": sum(a["written"] for a in accounts),
        "segments_removed": sum(a["removed"] for a in accounts),
        "events_removed": sum(a["removed_events"] for a in accounts),
        "bytes_removed": sum(a["removed_bytes"] for a in accounts),
        "pins": sorted(
            {(p["reason"], p["step"]) for a in accounts for p in a.get("pins", [])},
            key=lambda pin: pin[1],
        ),
        "summary_rows": trace.summaries.height,
        "summary_steps": int(trace.summaries["step"].n_unique()) if trace.summaries.height else 0,
    }
