"""Run the detectors over each run's metrics and rank what they find."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from syncpace.analysis.detectors import DETECTORS, Context, Detector
from syncpace.analysis.detectors.hosts import attach_host_evidence
from syncpace.analysis.findings import STOPPED, SYMPTOMS, Finding, Severity, rank_findings
from syncpace.analysis.metrics import RunMetrics
from syncpace.analysis.scaling import ScalingPoint
from syncpace.analysis.thresholds import Thresholds

#: Findings that rest on arrival skews; an untrustworthy clock halves their confidence.
_SKEW_BASED = ("straggler", "locality_variance", "sync_amplification")


def diagnose_run(
    metrics: RunMetrics,
    thresholds: Thresholds,
    detectors: Sequence[Detector] = DETECTORS,
) -> list[Finding]:
    ctx = Context(metrics, thresholds)
    findings = [f for detector in detectors for f in detector(ctx)]
    if any(f.mode == "clock_uncertainty" for f in findings):
        findings = [
            replace(f, confidence=f.confidence / 2) if f.mode in _SKEW_BASED else f
            for f in findings
        ]
    if not any(f.severity >= Severity.WARNING for f in findings):
        findings.append(_healthy(ctx))
    findings = attach_host_evidence(findings, metrics, thresholds)
    return order(findings)


def order(findings: list[Finding]) -> list[Finding]:
    """A hang or desync first; then severity; ``healthy`` heads a list of notes;
    symptoms after causes."""
    ranked = rank_findings(findings)
    return sorted(
        ranked,
        key=lambda f: (
            f.mode not in STOPPED,
            -int(f.severity),
            f.mode != "healthy",
            f.mode in SYMPTOMS,
        ),
    )


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
        actions=("Nothing to fix; re-check at larger scale.",),
        run=m.run,
    )
