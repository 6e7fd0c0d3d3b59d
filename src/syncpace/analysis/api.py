"""The facade: trace directories in, metrics and ranked findings out."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from syncpace.analysis.detectors.hang import finding_of
from syncpace.analysis.diagnosis import diagnose_run, order, scaling_evidence
from syncpace.analysis.findings import Finding
from syncpace.analysis.hang import HangAnalysis, analyze_hang, hang_input
from syncpace.analysis.metrics import RunMetrics, compute_metrics
from syncpace.analysis.scaling import ScalingPoint, scaling_curve
from syncpace.analysis.thresholds import Thresholds
from syncpace.trace.merge import join_parts
from syncpace.trace.reader import Trace, load_trace


@dataclass(frozen=True)
class Analysis:
    """Metrics of every run, the scaling curve across them, and the ranked findings."""

    runs: tuple[RunMetrics, ...]
    findings: tuple[Finding, ...]
    scaling: tuple[ScalingPoint, ...]
    thresholds: Thresholds

    @property
    def top(self) -> Finding:
        return self.findings[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "findings": [f.to_json() for f in self.findings],
            "metrics": {
                "runs": [r.summary() for r in self.runs],
                "scaling": [p.to_json() for p in self.scaling],
                "busbw_note": "busbw uses the nccl-tests factors, which assume a flat topology",
            },
        }


def analyze(
    traces: Sequence[Trace | str | os.PathLike[str]] | Trace | str | os.PathLike[str],
    thresholds: Thresholds | None = None,
    *,
    warmup_steps: int = 1,
) -> Analysis:
    """Analyse one or several runs (e.g. the same job at different world sizes)."""
    if isinstance(traces, (Trace, str, os.PathLike)):
        traces = [traces]
    thresholds = thresholds or Thresholds()
    # Per-node directories of one job (disjoint ranks, one world size) are one run.
    loaded = join_parts([t if isinstance(t, Trace) else load_trace(t) for t in traces])
    runs = [compute_metrics(t, warmup_steps=warmup_steps) for t in loaded]
    curve = scaling_curve(
        [(r.run, r.world_size, r.iteration_ns / 1e9, r.iteration.get("cv", 0.0)) for r in runs]
    )
    findings: list[Finding] = []
    for run in runs:
        findings.extend(diagnose_run(run, thresholds))
    if len(runs) > 1:
        findings = order(scaling_evidence(findings, curve))
    return Analysis(tuple(runs), tuple(findings), tuple(curve), thresholds)


def find_hang(
    trace: Trace, thresholds: Thresholds | None = None
) -> tuple[HangAnalysis, Finding | None]:
    """The fast path for a job that may still be hung: only the hang measurement (no
    other metric) and its finding, if the job stopped or its calls disagree."""
    thresholds = thresholds or Thresholds()
    analysis = analyze_hang(hang_input(trace))
    return analysis, finding_of(analysis, thresholds.hang_wait_s, str(trace.path))
