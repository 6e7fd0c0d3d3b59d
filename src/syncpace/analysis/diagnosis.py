"""Run the detectors over each run's metrics, rank what they find, and build the run's
what-if table from the same replays."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from syncpace.analysis import costs, modes
from syncpace.analysis.detectors import DETECTORS, Context, Detector, advice
from syncpace.analysis.detectors.arrival import rank_compute
from syncpace.analysis.detectors.hosts import attach_host_evidence
from syncpace.analysis.findings import Finding, Severity, rank_findings
from syncpace.analysis.metrics import RunMetrics
from syncpace.analysis.modes import Role
from syncpace.analysis.replay import PacerFactory
from syncpace.analysis.replay import counterfactuals as cf
from syncpace.analysis.replay.whatif import Outcome, WhatIf
from syncpace.analysis.scaling import ScalingPoint
from syncpace.analysis.thresholds import Thresholds


@dataclass(frozen=True)
class Diagnosis:
    """The ranked findings of one run and its what-if table (None without a replay)."""

    findings: list[Finding]
    what_if: WhatIf | None


def diagnose(
    metrics: RunMetrics,
    thresholds: Thresholds,
    detectors: Sequence[Detector] = DETECTORS,
    pacer: PacerFactory | None = None,
) -> Diagnosis:
    ctx = Context(metrics, thresholds, pacer)
    findings = [f for detector in detectors for f in detector(ctx)]
    if any(f.mode == "clock_uncertainty" for f in findings):
        findings = [
            replace(f, confidence=f.confidence / 2) if modes.get(f.mode).skew_based else f
            for f in findings
        ]
    findings = _symptoms(_one_per_cause(ctx, findings))
    generic_counterfactuals(ctx)
    findings = replay_floor(ctx, findings)
    if not any(f.severity >= Severity.WARNING for f in findings):
        findings.append(_healthy(ctx))
    findings = [_weighed_by_data(f, metrics, thresholds) for f in findings]
    findings = order(attach_host_evidence(findings, metrics, thresholds))
    return Diagnosis(findings, what_if_table(ctx, findings))


def diagnose_run(
    metrics: RunMetrics,
    thresholds: Thresholds,
    detectors: Sequence[Detector] = DETECTORS,
    pacer: PacerFactory | None = None,
) -> list[Finding]:
    return diagnose(metrics, thresholds, detectors, pacer).findings


#: The roles whose confidence rests on the iterations measured (a data-quality note or
#: a stopped job does not: one stall record is as sure as many).
_MEASURED = (Role.CAUSE, Role.SYMPTOM, Role.HEALTHY)


def data_weight(iterations: int, confident_steps: int) -> float:
    """How far ``iterations`` analysed support a finding: 1 from ``confident_steps`` on,
    else sqrt(iterations / confident_steps), as a mean's standard error grows when
    fewer values make it (one iteration of 20 needed: 0.22)."""
    if iterations >= confident_steps:
        return 1.0
    return math.sqrt(max(iterations, 0) / confident_steps)


def _weighed_by_data(f: Finding, metrics: RunMetrics, thresholds: Thresholds) -> Finding:
    mode = modes.get(f.mode)
    if mode is None or mode.role not in _MEASURED:
        return f
    weight = data_weight(int(metrics.quality.get("steps_analyzed", 0)), thresholds.confident_steps)
    return f if weight >= 1 else replace(f, confidence=round(f.confidence * weight, 3))


def _one_per_cause(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """Contention that lasts makes the ranks next to the contended links end late: the
    slow_link finding on ranks a fabric_contention finding names is the same cause seen
    twice, and is left out; its replay is then contention's (``Context.claim``)."""
    contended = {r for f in findings if f.mode == "fabric_contention" for r in f.ranks}
    out = []
    for f in findings:
        if f.mode == "slow_link" and f.ranks and set(f.ranks) <= contended:
            ctx.claim((f.evidence.get("counterfactual") or {}).get("name", ""), "fabric_contention")
        else:
            out.append(f)
    return out


def replay_floor(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """The verdict never contradicts the replay: every what-if row that removes a cause
    (:func:`syncpace.analysis.costs.cause_rows`) and saves, less its error, at least the
    reporting threshold (``warning_cost``) has a finding of that cause at the severity
    its saving maps to (:func:`syncpace.analysis.costs.severity`) or above. A cause's
    finding below it is raised; a cause its detector did not name (its own test not
    met) gets a finding from the row. A cause seen only as a symptom of another
    (overlap behind a network cause) stays the symptom it is."""
    th = ctx.thresholds
    out = list(findings)
    for row in costs.cause_rows([o for o, _ in ctx.replays.values()]):
        if not costs.reported(row.saving, row.error, th):
            continue
        need = costs.severity(row.saving, row.error, th)
        same = [i for i, f in enumerate(out) if f.mode == row.cause]
        if any(out[i].severity >= need or out[i].symptom for i in same):
            continue
        if same:
            i = max(same, key=lambda i: out[i].cost)
            out[i] = replace(out[i], severity=need)
        else:
            out.append(_from_row(ctx, row, need))
    return out


def _from_row(ctx: Context, row: Outcome, severity: Severity) -> Finding:
    """A cause's finding from its replay alone: its cost is the row's saving."""
    title = modes.get(row.cause).title
    return Finding(
        mode=row.cause,
        severity=severity,
        confidence=min(1.0, max(0.0, 1.0 - row.error / max(row.saving, 1e-9))),
        summary=(
            f"{title.lower()}: the replay saves {row.saving:.1%} (± {row.error:.1%}) of each "
            f"iteration with {row.description}, though the detector's own test was not met"
        ),
        cost=max(0.0, min(1.0, row.saving)),
        evidence={"counterfactual": row.to_json(), "from_replay_only": True},
        actions=advice.for_mode(row.cause, ctx.metrics.parallelism),
        run=ctx.metrics.run,
        cost_error=row.error,
        cost_basis="replay",
    )


def _symptoms(findings: list[Finding]) -> list[Finding]:
    """Exposed communication is a symptom when a network cause is found: slow transfers
    leave the iteration waiting, and fixing them removes what overlap would hide. A
    network cause costed beyond overlap (``Mode.beyond_overlap``: ``bandwidth_bound``)
    makes it one only where it costs as much: otherwise better overlap (re-bucketing)
    is the larger fix, and the bytes' cost is what remains after it. A symptom is never
    more than a warning: it says where time goes, not what to fix."""
    causes = [f for f in findings if not f.symptom and f.severity >= Severity.WARNING]
    network = [f for f in causes if modes.network_cause(f.mode)]
    out = []
    for f in findings:
        if f.mode == "poor_overlap" and any(
            not modes.beyond_overlap(n.mode) or n.cost >= f.cost for n in network
        ):
            f = replace(f, symptom=True)
        if f.symptom and f.severity > Severity.WARNING:
            f = replace(f, severity=Severity.WARNING)
        out.append(f)
    return out


def order(findings: list[Finding]) -> list[Finding]:
    """A hang or desync first; then severity; ``healthy`` heads a list of notes;
    symptoms after causes; then the cause's cost (the replayed saving), so a symptom
    falls below its cause."""
    ranked = rank_findings(findings)
    return sorted(
        ranked,
        key=lambda f: (
            not modes.has_role(f.mode, Role.STOPPED),
            -int(f.severity),
            f.mode != "healthy",
            f.symptom or modes.has_role(f.mode, Role.SYMPTOM),
        ),
    )


def generic_counterfactuals(ctx: Context) -> None:
    """The generic counterfactuals (no jitter, ideal overlap, links at the run's best or
    the benchmarked rate, the slowest rank like the others, pacing with the live pacer
    when one is given), replayed before the floor reads them."""
    prog, base = ctx.program, ctx.base
    if prog is None or base is None or base.measured_ns <= 0:
        return
    ctx.counterfactual("jitter", "no compute jitter", cf.without_jitter)
    ctx.counterfactual("overlap", "ideal overlap", cf.ideal_overlap)
    ctx.counterfactual("links:best", "every link at the run's best rate", cf.transfers_at_best)
    th = ctx.thresholds
    if th.link_gbps > 0:
        ctx.counterfactual(
            "links:rate",
            f"every link at {th.link_gbps:.3g} GB/s (benchmark)",
            lambda p: cf.transfers_at_rate(p, th.link_gbps, th.link_alpha_us * 1e3),
        )
    rc = rank_compute(ctx)
    slowest = int(rc.sort("excess_ns", descending=True)["rank"][0]) if rc.height > 1 else -1
    if slowest >= 0 and f"straggler:{slowest}" not in ctx.replays:
        ctx.counterfactual(
            f"slowest:{slowest}",
            f"slowest rank ({slowest}) computing like the others",
            lambda p: cf.without_excess(p, [slowest]),
        )
    if ctx.pacer is not None:
        ctx.counterfactual("pacing", "pacing on (the live pacer)", cf.paced(ctx.pacer))


def what_if_table(ctx: Context, findings: list[Finding]) -> WhatIf | None:
    """Every finding's counterfactual, the generic ones (:func:`generic_counterfactuals`)
    and all found causes removed at once."""
    prog, base = ctx.program, ctx.base
    if prog is None or base is None or base.measured_ns <= 0:
        return None
    replayed = [f for f in findings if "counterfactual" in f.evidence]
    names = [f.evidence["counterfactual"]["name"] for f in replayed]
    generic_counterfactuals(ctx)
    causes = [
        ctx.replays[n][1]
        for f, n in zip(replayed, names, strict=True)
        if not f.symptom and n in ctx.replays
    ]
    if len(causes) > 1:
        # each cause's change is already held to the links' capacity, and removing
        # the bytes (bandwidth) may go below it
        ctx.counterfactual("all", "all causes found removed", cf.combine(causes), bytes_kept=False)
    rows = [ctx.replays[n][0] for n in names if n in ctx.replays]
    rows += [o for n, (o, _) in ctx.replays.items() if n not in names]
    return WhatIf(ctx.metrics.run, base, tuple(rows))


def scaling_evidence(findings: list[Finding], curve: list[ScalingPoint]) -> list[Finding]:
    """Attach the CV-versus-world-size curve to sync-amplification findings."""
    if len(curve) < 2:
        return findings
    cvs = {p.world_size: round(p.cv, 4) for p in curve}
    grows = all(a.cv <= b.cv for a, b in zip(curve, curve[1:], strict=False))
    out = []
    for f in findings:
        if f.mode == "sync_amplification":
            evidence = {**f.evidence, "cv_by_world_size": cvs, "cv_grows_with_scale": grows}
            f = replace(
                f, evidence=evidence, confidence=min(1.0, f.confidence * (1.25 if grows else 0.8))
            )
        out.append(f)
    return out


def _healthy(ctx: Context) -> Finding:
    m = ctx.metrics
    return Finding(
        mode="healthy",
        severity=Severity.INFO,
        confidence=1.0,
        summary=(
            f"no scaling problem found ({m.parallelism.describe()}): "
            f"iteration {m.iteration_ns / 1e6:.2f} ms, "
            f"CV {m.iteration.get('cv', 0.0):.3f}, "
            f"network share {m.comm.get('network_share', 0.0):.0%}"
        ),
        evidence={
            "iteration_ms": round(m.iteration_ns / 1e6, 4),
            "iteration_cv": round(m.iteration.get("cv", 0.0), 4),
            "network_share": round(m.comm.get("network_share", 0.0), 4),
            "exposed_share": round(m.comm.get("exposed_share", 0.0), 4),
            "parallelism": m.parallelism.describe(),
        },
        actions=advice.healthy(),
        run=m.run,
    )


__all__ = [
    "Diagnosis",
    "diagnose",
    "diagnose_run",
    "order",
    "replay_floor",
    "scaling_evidence",
]
