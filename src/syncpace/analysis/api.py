"""The facade: trace directories in, metrics and ranked findings out."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from syncpace.analysis.diagnosis import diagnose, order, scaling_evidence
from syncpace.analysis.findings import Finding
from syncpace.analysis.metrics import RunMetrics, compute_metrics
from syncpace.analysis.replay import PacerFactory
from syncpace.analysis.replay.whatif import WhatIf
from syncpace.analysis.scaling import ScalingPoint, scaling_curve
from syncpace.analysis.thresholds import Thresholds
from syncpace.trace.reader import Trace, load_trace


@dataclass(frozen=True)
class Analysis:
    """Metrics of every run, the scaling curve across them, the ranked findings, and per
    run the what-if table of its replay (None where a run could not be replayed)."""

    runs: tuple[RunMetrics, ...]
    findings: tuple[Finding, ...]
    scaling: tuple[ScalingPoint, ...]
    thresholds: Thresholds
    what_if: tuple[WhatIf | None, ...] = ()

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
            "what_if": [w.to_json() if w is not None else None for w in self.what_if],
        }

    def what_if_text(self) -> str:
        """The what-if tables of every run, as plain text."""
        return "\n\n".join(
            w.table() if w is not None else f"{r.run}: no replay (no collectives or steps)"
            for r, w in zip(self.runs, self.what_if, strict=False)
        )


def analyze(
    traces: Sequence[Trace | str | os.PathLike[str]] | Trace | str | os.PathLike[str],
    thresholds: Thresholds | None = None,
    *,
    warmup_steps: int = 1,
    pacer: PacerFactory | None = None,
) -> Analysis:
    """Analyse one or several runs (e.g. the same job at different world sizes).

    ``pacer`` (world size -> pacing policy, e.g. ``control.make_policy`` with a config)
    adds a what-if row with pacing on, run live inside the replay."""
    if isinstance(traces, (Trace, str, os.PathLike)):
        traces = [traces]
    thresholds = thresholds or Thresholds()
    loaded = [t if isinstance(t, Trace) else load_trace(t) for t in traces]
    runs = [compute_metrics(t, warmup_steps=warmup_steps) for t in loaded]
    curve = scaling_curve(
        [(r.run, r.world_size, r.iteration_ns / 1e9, r.iteration.get("cv", 0.0)) for r in runs]
    )
    findings: list[Finding] = []
    tables: list[WhatIf | None] = []
    for run in runs:
        result = diagnose(run, thresholds, pacer=pacer)
        findings.extend(result.findings)
        tables.append(result.what_if)
    if len(runs) > 1:
        findings = order(scaling_evidence(findings, curve))
    return Analysis(tuple(runs), tuple(findings), tuple(curve), thresholds, tuple(tables))
