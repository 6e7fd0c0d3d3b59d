"""Overlap findings: communication left exposed, and jobs dominated by the network."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from syncpace.analysis import costs
from syncpace.analysis.detectors import advice
from syncpace.analysis.detectors.context import Context, confidence_of, ms
from syncpace.analysis.findings import Finding
from syncpace.analysis.replay import Change
from syncpace.analysis.replay import counterfactuals as cf
from syncpace.analysis.replay.rebucket import MIB, Rebucketing, best_rebucketing
from syncpace.analysis.replay.whatif import Outcome


@dataclass(frozen=True)
class OverlapFix:
    """The better of ideal overlap and re-bucketing for a run: its replay, its change,
    and the bucket count where re-bucketing is the better."""

    outcome: Outcome
    change: Change
    rebucketing: Rebucketing | None = None


def _fixed(ctx: Context) -> tuple[float, str]:
    """A transfer's fixed cost (ns) for re-bucketing, and where it comes from: the link
    benchmark's α, else a fit over every size the run moved (a small loss all-reduce
    beside the gradients' is enough), else none (buckets then stop at the knee)."""
    th = ctx.thresholds
    if th.link_gbps > 0:
        return th.link_alpha_us * 1e3, "the link benchmark's latency"
    prog = ctx.program
    every = np.ones(ctx.metrics.instances.height, dtype=bool)
    fitted = cf.own_latency(prog, every) if prog is not None else None
    if fitted is not None:
        return fitted, f"a {fitted / 1e6:.2f} ms latency fitted over the run's sizes"
    return 0.0, (
        f"no latency known (one size, no link benchmark): buckets of at least "
        f"{th.latency_knee_bytes} bytes"
    )


def overlap_fix(ctx: Context) -> OverlapFix | None:
    """What overlap could save, once per run: ideal overlap, or the communication issued
    after compute re-bucketed during it (:mod:`syncpace.analysis.replay.rebucket`),
    whichever saves more; both rows go to the what-if table. None without a replay."""

    def compute() -> OverlapFix | None:
        # generic until a measured poor overlap claims it (a bound; re-bucketing's row
        # names its cause: its finding is made from it when the measure cannot see it)
        ideal = ctx.counterfactual("overlap", "ideal overlap", cf.ideal_overlap)
        prog = ctx.program
        if ideal is None or prog is None:
            return None
        fix = OverlapFix(ideal, ctx.replays["overlap"][1])
        fixed, fixed_from = _fixed(ctx)
        found = best_rebucketing(prog, fixed, fixed_from, ctx.thresholds.latency_knee_bytes)
        if found is None:
            return fix
        chosen, change = found
        row = ctx.counterfactual(
            "overlap:rebucket",
            f"{chosen.buckets} buckets issued during compute (bucket_cap_mb={chosen.cap_mb:.3g})",
            change,
            cause="poor_overlap",
        )
        assert row is not None
        return OverlapFix(row, change, chosen) if row.saving > ideal.saving else fix

    return ctx.memo("overlap_fix", compute)


def poor_overlap(ctx: Context) -> list[Finding]:
    """Communication left exposed: measured (a low overlap ratio with enough exposed),
    or, where the measure cannot see it, replayed: the exposed share counts what is in
    flight after a step's last call, so a bucket after backward followed by a small
    blocking call (the loss, a metric) reads as overlapped; re-bucketing's replay still
    finds it, and reports it from the reporting threshold (``warning_cost``) up."""
    comm, th = ctx.metrics.comm, ctx.thresholds
    exposed, ratio = comm.get("exposed_share", 0.0), comm.get("overlap_ratio", 1.0)
    measured = exposed >= th.overlap_min_exposed and ratio < th.overlap_max_ratio
    fix = overlap_fix(ctx)  # None without a replay
    rebucketing = fix.rebucketing if fix is not None else None
    replayed = (
        fix is not None
        and rebucketing is not None
        and costs.reported(fix.outcome.saving, fix.outcome.error, th)
    )
    if not measured and not replayed:
        return []
    replay = fix.outcome if fix is not None else None
    if measured and replay is not None:
        ctx.claim("overlap", "poor_overlap")
        replay = ctx.replays[replay.name][0]
    cost = replay.saving if replay is not None else exposed
    evidence = {
        "overlap_ratio": round(ratio, 4),
        "exposed_share": round(exposed, 4),
        "network_share": round(comm.get("network_share", 0.0), 4),
        "exposed_ms_per_iteration": ms(comm.get("exposed_ns_per_step", 0.0)),
        "parallelism": ctx.metrics.parallelism.describe(),
    }
    actions = advice.poor_overlap(ctx.metrics.parallelism)
    how = "overlapped as well as the compute allows"
    if rebucketing is not None and replay is not None and replay.name == "overlap:rebucket":
        r = rebucketing
        evidence["rebucketing"] = r.to_json()
        how = (
            f"in {r.buckets} buckets of {r.cap_mb:.3g} MiB issued during the compute before "
            f"them ({r.fixed_from})"
        )
        actions = (advice.rebucket(r.buckets, r.cap_mb, r.burst_bytes / MIB, cost), *actions)
    if measured:
        what = (
            f"only {ratio:.0%} of communication overlaps compute; {exposed:.1%} of each "
            "iteration waits for transfers issued after backward"
        )
    else:
        assert rebucketing is not None
        what = (
            f"every large transfer of a step ({rebucketing.burst_bytes / MIB:.3g} MiB) is "
            "issued after its compute and waited for (the measured overlap, which counts "
            "what is in flight after a step's last call, does not show it)"
        )
    confidence = min(1.0, (th.overlap_max_ratio - ratio) / th.overlap_max_ratio + 0.5)
    return [
        ctx.finding(
            "poor_overlap",
            exposed,
            confidence if measured else 0.5,
            f"{what}; {how}, each iteration would be {cost:.1%} shorter",
            replay=replay,
            evidence=evidence,
            actions=actions,
        )
    ]


def comm_dominated(ctx: Context) -> list[Finding]:
    comm, th = ctx.metrics.comm, ctx.thresholds
    share = comm.get("network_share", 0.0)
    if share <= th.comm_share:
        return []
    exposed = comm.get("exposed_share", 0.0)
    every = np.ones(ctx.metrics.instances.height, dtype=bool)
    replay = ctx.counterfactual(
        "no-network",
        "every transfer free (a bound)",
        lambda p: cf.transfers_scaled(p, 0.0, every),
        cause="comm_dominated",
        bytes_kept=False,
    )
    # The cost is the replay's with every transfer free: a bound, which differs from the
    # exposed share measured (free transfers also end the waits they cause elsewhere).
    bound = (
        f"; with every transfer free each iteration would be {replay.saving:.1%} shorter "
        "(a bound, not the exposed share)"
        if replay is not None
        else ""
    )
    return [
        ctx.finding(
            "comm_dominated",
            exposed,  # network time only costs what overlap does not hide
            confidence_of(share, th.comm_share),
            f"the network is busy {share:.0%} of each iteration ({exposed:.1%} exposed)"
            f"{bound}: a summary of the causes above, not a cause of its own",
            replay=replay,
            symptom=True,
            evidence={
                "network_share": round(share, 4),
                "exposed_share": round(exposed, 4),
                "threshold": th.comm_share,
            },
            actions=advice.comm_dominated(ctx.metrics.parallelism),
        )
    ]
