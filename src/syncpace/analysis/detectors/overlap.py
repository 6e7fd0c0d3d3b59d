"""Overlap findings: communication left exposed, and jobs dominated by the network."""

from __future__ import annotations

import numpy as np

from syncpace.analysis.detectors import advice
from syncpace.analysis.detectors.context import Context, confidence_of, ms
from syncpace.analysis.findings import Finding
from syncpace.analysis.replay import counterfactuals as cf


def poor_overlap(ctx: Context) -> list[Finding]:
    comm, th = ctx.metrics.comm, ctx.thresholds
    exposed, ratio = comm.get("exposed_share", 0.0), comm.get("overlap_ratio", 1.0)
    if exposed < th.overlap_min_exposed or ratio >= th.overlap_max_ratio:
        return []
    replay = ctx.counterfactual("overlap", "ideal overlap", cf.ideal_overlap, cause="poor_overlap")
    cost = replay.saving if replay is not None else exposed
    return [
        ctx.finding(
            "poor_overlap",
            exposed,
            min(1.0, (th.overlap_max_ratio - ratio) / th.overlap_max_ratio + 0.5),
            f"only {ratio:.0%} of communication overlaps compute; {exposed:.1%} of each "
            f"iteration waits for transfers issued after backward; overlapped as well as "
            f"the compute allows, each iteration would be {cost:.1%} shorter",
            replay=replay,
            evidence={
                "overlap_ratio": round(ratio, 4),
                "exposed_share": round(exposed, 4),
                "network_share": round(comm.get("network_share", 0.0), 4),
                "exposed_ms_per_iteration": ms(comm.get("exposed_ns_per_step", 0.0)),
                "parallelism": ctx.metrics.parallelism.describe(),
            },
            actions=advice.poor_overlap(ctx.metrics.parallelism),
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
