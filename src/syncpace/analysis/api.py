"""The facade: trace directories in, metrics and ranked findings out."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from syncpace.analysis.diagnosis import diagnose_run, order, scaling_evidence
from syncpace.analysis.findings import Finding
from syncpace.analysis.metrics import RunMetrics, compute_metrics
from syncpace.analysis.scaling import ScalingPoint, scaling_curve
from syncpace.analysis.thresholds import Thresholds
from syncpace.trace.merge import group_dirs, load_job
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
    """Analyse one or several runs (e.g. the same job at different world sizes).

    Directories that hold parts of one job (each node wrote its own) are loaded as
    that one job (:func:`syncpace.trace.merge.group_dirs`): a scaling study compares
    different jobs only."""
    if isinstance(traces, (Trace, str, os.PathLike)):
        traces = [traces]
    thresholds = thresholds or Thresholds()
    loaded = [t for t in traces if isinstance(t, Trace)]
    dirs = [t for t in traces if not isinstance(t, Trace)]
    loaded += [load_job(job) if len(job) > 1 else load_trace(job[0]) for job in group_dirs(dirs)]
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
