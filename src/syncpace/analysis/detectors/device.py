"""Late CPU or slow GPU: why a rank arrives last on the device.

On device time (:mod:`syncpace.analysis.timebase`) a straggler is a rank whose device
reaches the collectives late. Two different faults look alike there, and the host's
enqueue times tell them apart:

* a **late CPU**: the rank's host enqueues its calls late against its peers' too, and
  its CPU runs barely ahead of its device (the device waited for the host: data
  loading, Python overhead, launch-bound kernels);
* a **slow GPU**: the host enqueues on time or early, far ahead of its device, and
  still the device arrives late (throttling, a degraded or shared GPU, slower
  kernels).

Both figures are against the typical rank (the fast half's median, which a slow half
cannot move), as the straggler's lateness is. What counts as late and as near zero are
thresholds (``late_cpu_share``, ``late_cpu_run_ahead_us``). This is evidence on the
straggler finding, not a finding of its own: the cause, and its cost, is the
straggler's; this says where to look.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from syncpace.analysis.detectors import advice
from syncpace.analysis.detectors.context import Context, fast_half, ms

LATE_CPU, SLOW_GPU, UNCLEAR = "late CPU", "slow GPU", "unclear"


@dataclass(frozen=True)
class Side:
    """One late rank on device time: which side is late, and the figures that say so
    (ns; lateness beyond the typical rank's, the run-aheads medians over steps)."""

    rank: int
    kind: str
    device_late_ns: float
    host_late_ns: float
    run_ahead_ns: float
    typical_run_ahead_ns: float


def sides(ctx: Context, ranks: list[int]) -> list[Side]:
    """Late CPU or slow GPU for each of ``ranks``; empty off the device clock."""
    pr = ctx.metrics.per_rank
    if not ctx.metrics.time_base.device or "run_ahead_p50_ns" not in pr.columns:
        return []
    pr = pr.drop_nulls(["lateness_p50_ns", "host_lateness_p50_ns", "run_ahead_p50_ns"])
    if pr.height < 2:
        return []
    typical = pr.select(
        device=fast_half(pl.col("lateness_p50_ns")),
        host=fast_half(pl.col("host_lateness_p50_ns")),
        ahead=fast_half(pl.col("run_ahead_p50_ns")),
    ).row(0, named=True)
    out = []
    for row in pr.filter(pl.col("rank").is_in(ranks)).sort("rank").iter_rows(named=True):
        device = float(row["lateness_p50_ns"]) - float(typical["device"] or 0.0)
        host = float(row["host_lateness_p50_ns"]) - float(typical["host"] or 0.0)
        ahead = float(row["run_ahead_p50_ns"])
        typical_ahead = float(typical["ahead"] or 0.0)
        kind = _kind(ctx, device, host, ahead, typical_ahead)
        out.append(Side(int(row["rank"]), kind, device, host, ahead, typical_ahead))
    return out


def _kind(ctx: Context, device: float, host: float, ahead: float, typical_ahead: float) -> str:
    """Late CPU: the host late by at least ``late_cpu_share`` of the device lateness, and
    the device waiting on it: its CPU no further ahead of it than the typical rank's
    (plus ``late_cpu_run_ahead_us``; the work queued between a call's enqueue and the
    collective, a backward pass, keeps a waiting device's run-ahead above zero). Slow
    GPU: the host on time or less late than that, so the device had its work in time
    and still arrives late. Unclear: a late host whose device is behind it all the
    same (both late)."""
    th = ctx.thresholds
    if device <= 0:
        return UNCLEAR
    if host < th.late_cpu_share * device:
        return SLOW_GPU
    if ahead <= typical_ahead + th.late_cpu_run_ahead_us * 1e3:
        return LATE_CPU
    return UNCLEAR


def evidence(found: list[Side]) -> dict[str, Any]:
    """The figures of :func:`sides` as the finding's evidence (ms, by rank)."""
    if not found:
        return {}
    return {
        "late_side": {s.rank: s.kind for s in found},
        "device_late_p50_ms": {s.rank: ms(s.device_late_ns) for s in found},
        "host_late_p50_ms": {s.rank: ms(s.host_late_ns) for s in found},
        "run_ahead_p50_ms": {s.rank: ms(s.run_ahead_ns) for s in found},
        "typical_run_ahead_p50_ms": ms(found[0].typical_run_ahead_ns),
    }


def sentence(found: list[Side]) -> str:
    """What the host times say of the late ranks, for the finding's summary ('' when
    nothing: off the device clock)."""
    parts = []
    for kind in (LATE_CPU, SLOW_GPU):
        these = [s for s in found if s.kind == kind]
        if not these:
            continue
        ranks = ", ".join(str(s.rank) for s in these)
        host = max(s.host_late_ns for s in these) / 1e6
        ahead = max(s.run_ahead_ns for s in these) / 1e6
        if kind == LATE_CPU:
            parts.append(
                f"a late CPU on rank{'s' * (len(these) > 1)} {ranks}: its host enqueues "
                f"{host:.2f} ms late too and its device waits on it (run-ahead {ahead:.2f} ms)"
            )
        else:
            early = f"{-host:.2f} ms early" if host < 0 else f"only {host:.2f} ms late"
            parts.append(
                f"a slow GPU on rank{'s' * (len(these) > 1)} {ranks}: its host enqueues "
                f"{early}, {ahead:.2f} ms ahead of its device, yet the device arrives late"
            )
    return "; ".join(parts)


def actions(found: list[Side]) -> tuple[str, ...]:
    """What to look at first, for the side that is late."""
    out: list[str] = []
    for kind, words in ((LATE_CPU, advice.late_cpu), (SLOW_GPU, advice.slow_gpu)):
        ranks = [s.rank for s in found if s.kind == kind]
        if ranks:
            out.extend(words(ranks))
    return tuple(out)
