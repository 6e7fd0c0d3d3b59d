"""The facade: trace directories in, metrics and ranked findings out.

Several runs are one of two studies, decided by their world sizes:

* runs of **equal** world size are runs of one job (A/B, paced and unpaced, before and
  after a fix): a *comparison* — side by side, each against the first (the baseline);
* runs of **different** world sizes are a *scaling* study: a curve of speedup and
  efficiency over world size (one point per size);
* runs that are not one job (their collectives or payload per iteration differ:
  :mod:`syncpace.analysis.jobs`) are *separate*: side by side, with no curve and no
  change against another job's run. The same run given twice is refused.

Runs of one world size never form a scaling curve: a vertical line of "speedups" at a
single world size is a misreading, not a measurement.
"""

from __future__ import annotations

import filecmp
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from syncpace.analysis.comparison import RunComparison, compare_runs
from syncpace.analysis.costs import CostAccount, across_runs, cost_account
from syncpace.analysis.detectors import DETECTORS, Detector
from syncpace.analysis.detectors.hang import finding_of
from syncpace.analysis.diagnosis import diagnose, order, scaling_evidence
from syncpace.analysis.findings import Finding
from syncpace.analysis.hang.inputs import hang_input
from syncpace.analysis.hang.measure import analyze_hang
from syncpace.analysis.hang.points import HangAnalysis
from syncpace.analysis.jobs import job_shape, one_job, refuse_repeats, relation
from syncpace.analysis.metrics import RunMetrics, compute_metrics
from syncpace.analysis.replay import PacerFactory
from syncpace.analysis.replay.whatif import WhatIf
from syncpace.analysis.scaling import ScalingPoint, scaling_curve
from syncpace.analysis.streaming import stream_metrics
from syncpace.analysis.thresholds import Thresholds
from syncpace.analysis.timeline import IterationSample, sample_iterations
from syncpace.trace.merge import join_parts
from syncpace.trace.read.meta import read_metadata
from syncpace.trace.reader import Trace, load_trace

Study = Literal["single", "comparison", "scaling", "separate"]


@dataclass(frozen=True)
class Analysis:
    """Metrics of every run, how the runs relate (comparison or scaling curve), the
    ranked findings, a few iterations of each run in full detail, and per run the
    what-if table of its replay (None where a run could not be replayed)."""

    runs: tuple[RunMetrics, ...]
    findings: tuple[Finding, ...]
    scaling: tuple[ScalingPoint, ...]
    thresholds: Thresholds
    comparison: tuple[RunComparison, ...] = ()
    samples: tuple[IterationSample, ...] = ()
    what_if: tuple[WhatIf | None, ...] = ()
    #: What the runs are when they are not one job (empty when they are).
    relation: str = ""
    #: Per run, its causes' costs alone and together (None without a replay).
    costs: tuple[CostAccount | None, ...] = ()
    #: Why one cause's cost differs between runs, a line per cause.
    cost_notes: tuple[str, ...] = ()

    @property
    def top(self) -> Finding:
        return self.findings[0]

    @property
    def study(self) -> Study:
        """``single``, ``comparison`` (all runs of one world size), ``scaling`` or
        ``separate`` (runs of different jobs)."""
        if len(self.runs) < 2:
            return "single"
        if self.relation:
            return "separate"
        return "scaling" if len({r.world_size for r in self.runs}) > 1 else "comparison"

    def to_json(self) -> dict[str, Any]:
        return {
            "findings": [f.to_json() for f in self.findings],
            "metrics": {
                "study": self.study,
                "relation": self.relation or None,
                "runs": [r.summary() for r in self.runs],
                "comparison": [c.to_json() for c in self.comparison],
                "scaling": [p.to_json() for p in self.scaling],
                "busbw_note": "busbw uses the nccl-tests factors, which assume a flat topology",
            },
            "what_if": [w.to_json() if w is not None else None for w in self.what_if],
            "costs": {
                "model": COST_MODEL,
                "runs": [a.to_json() if a is not None else None for a in self.costs],
                "across_runs": list(self.cost_notes),
            },
        }

    def what_if_text(self) -> str:
        """The what-if tables of every run, as plain text."""
        return "\n\n".join(
            w.table() if w is not None else f"{r.run}: {NO_REPLAY}"
            for r, w in zip(self.runs, self.what_if, strict=False)
        )


#: What every cost is, said once (the JSON carries it beside the figures).
COST_MODEL = (
    "a cause's cost is what removing that cause alone saves in a replay of the run, as a "
    "share of that run's replayed iteration; causes overlap, so their costs need not add "
    "up: 'together' is all causes removed at once; symptoms are bounds, never added"
)

#: Why a run has no what-if table.
NO_REPLAY = "no replay (no collectives or steps, an imported trace, or iterations too large)"


def analyze(
    traces: Sequence[Trace | str | os.PathLike[str]] | Trace | str | os.PathLike[str],
    thresholds: Thresholds | None = None,
    *,
    warmup_steps: int = 1,
    pacer: PacerFactory | None = None,
    detectors: Sequence[Detector] = DETECTORS,
) -> Analysis:
    """Analyse one or several runs: of one job (equal world sizes, compared side by
    side) or of different world sizes (a scaling curve).

    Directories that hold parts of one job (each node wrote its own) are loaded as
    that one job (:func:`syncpace.trace.merge.group_dirs`): comparisons and scaling
    studies are across different jobs only.

    ``pacer`` (world size -> pacer, e.g. ``control.Pacer`` with a ``PacingConfig``)
    adds a what-if row with pacing on, run live inside the replay.

    ``detectors`` replaces the built-in ones (``detectors.DETECTORS``), run in its
    order on every run: a detector of one's own joins them as ``(*DETECTORS, mine)``,
    its mode registered first (:func:`syncpace.analysis.modes.register`)."""
    if isinstance(traces, (Trace, str, os.PathLike)):
        traces = [traces]
    thresholds = thresholds or Thresholds()
    runs, samples, seen, items = [], [], [], []
    for item in _loaded(traces):
        if len(traces) > 1:  # a run given after another may be that run again
            items.append(item)
            seen.append((str(_path(item)), _meta(item)))
            refuse_repeats(seen, lambda i, j: _same_data(items[i], items[j]))
        if isinstance(item, Trace):
            run = compute_metrics(item, warmup_steps=warmup_steps)
            sample = sample_iterations(item, run)
        else:  # a whole run directory: a window of steps at a time, memory stays bounded
            run, sample = stream_metrics(item, warmup_steps=warmup_steps)
        runs.append(run)
        samples.append(sample)
    shapes = [job_shape(r) for r in runs]
    jobs = one_job(shapes)
    separate = relation(shapes) if len(runs) > 1 else ""
    curve = (
        []
        if separate
        else scaling_curve(
            [(r.run, r.world_size, r.iteration_ns / 1e9, r.iteration.get("cv", 0.0)) for r in runs]
        )
    )
    findings: list[Finding] = []
    tables: list[WhatIf | None] = []
    accounts: list[CostAccount | None] = []
    for run in runs:
        result = diagnose(run, thresholds, detectors, pacer=pacer)
        findings.extend(result.findings)
        tables.append(result.what_if)
        accounts.append(cost_account(result.findings, result.what_if))
    if len(runs) > 1:
        findings = order(scaling_evidence(findings, curve))
    return Analysis(
        tuple(runs),
        tuple(findings),
        tuple(curve),
        thresholds,
        comparison=tuple(compare_runs(runs, jobs)),
        samples=tuple(samples),
        what_if=tuple(tables),
        relation=separate,
        costs=tuple(accounts),
        cost_notes=tuple(across_runs(accounts, [r.pacing is not None for r in runs])),
    )


def _path(item: Trace | str | os.PathLike[str]) -> str | os.PathLike[str]:
    return item.path if isinstance(item, Trace) else item


def _same_data(a: Trace | str | os.PathLike[str], b: Trace | str | os.PathLike[str]) -> bool:
    """Whether two runs of identical metadata hold the same data: one directory twice,
    a copy (every rank file equal), or loaded traces with equal events and steps."""
    if isinstance(a, Trace) and isinstance(b, Trace):
        return a.events.equals(b.events) and a.steps.equals(b.steps)
    if isinstance(a, Trace) or isinstance(b, Trace):
        return False
    if Path(a).resolve() == Path(b).resolve():
        return True
    files = sorted(p.name for p in Path(a).glob("rank-*") if p.is_file())
    if files != sorted(p.name for p in Path(b).glob("rank-*") if p.is_file()):
        return False
    return all(filecmp.cmp(Path(a) / f, Path(b) / f, shallow=False) for f in files)


def _meta(item: Trace | str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    return item.meta if isinstance(item, Trace) else read_metadata(item).meta


def _loaded(
    traces: Sequence[Trace | str | os.PathLike[str]],
) -> Iterator[Trace | str | os.PathLike[str]]:
    """The runs, one at a time: loaded traces as they are, run directories as paths (to
    be streamed); directories that each hold part of one job's ranks (one per node: one
    job id, or without one the same world size and disjoint ranks) are loaded and joined
    into one."""
    parts = []
    for item in traces:
        if not isinstance(item, Trace) and (
            len(traces) == 1 or not read_metadata(item).missing_ranks
        ):
            yield item
            continue
        trace = item if isinstance(item, Trace) else load_trace(item)
        if trace.missing_ranks and len(traces) > 1:
            parts.append(trace)
        else:
            yield trace
    yield from join_parts(parts)


def find_hang(
    trace: Trace, thresholds: Thresholds | None = None
) -> tuple[HangAnalysis, Finding | None]:
    """The fast path for a job that may still be hung: only the hang measurement (no
    other metric) and its finding, if the job stopped or its calls disagree."""
    thresholds = thresholds or Thresholds()
    analysis = analyze_hang(hang_input(trace))
    return analysis, finding_of(analysis, thresholds.hang_wait_s, str(trace.path))
