"""Findings of several runs merged into one entry per cause, with each run's values.

Two runs of one job usually show the same causes: the report shows each cause once,
with a column per run, instead of one card per run. Findings merge by mode and by
their place among that mode's findings in their run (a run with two findings of one
mode keeps two entries). The merged list keeps the diagnosis' order: an entry stands
where its first finding stood.
"""

from __future__ import annotations

from dataclasses import dataclass

from syncpace.analysis import Analysis, Finding, Role, Severity, modes


@dataclass(frozen=True)
class MergedFinding:
    """One cause across runs: ``per_run`` holds (run, finding or None) in run order."""

    mode: str
    per_run: tuple[tuple[str, Finding | None], ...]

    @property
    def found(self) -> list[Finding]:
        return [f for _, f in self.per_run if f is not None]

    @property
    def first(self) -> Finding:
        return self.found[0]

    @property
    def cost(self) -> float:
        """The largest cost over the runs that show it (what the verdict ranks by)."""
        return max(f.cost for f in self.found)

    @property
    def severity(self) -> Severity:
        return max(f.severity for f in self.found)

    @property
    def confidence(self) -> float:
        return max(f.confidence for f in self.found)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted({r for f in self.found for r in f.ranks}))

    @property
    def source(self) -> tuple[str, ...]:
        """What causes it, over the runs that show it (first seen first)."""
        return tuple(dict.fromkeys(s for f in self.found for s in f.source))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({n for f in self.found for n in f.nodes}))

    @property
    def is_quality(self) -> bool:
        return modes.has_role(self.mode, Role.QUALITY)

    @property
    def is_cause(self) -> bool:
        """A cause the job pays for: not a data-quality note, a symptom or 'healthy'."""
        symptom = modes.has_role(self.mode, Role.SYMPTOM) or any(f.symptom for f in self.found)
        return not self.is_quality and not symptom and not modes.has_role(self.mode, Role.HEALTHY)

    def finding_in(self, run: str) -> Finding | None:
        return dict(self.per_run).get(run)


def merge_findings(analysis: Analysis) -> list[MergedFinding]:
    runs = [r.run for r in analysis.runs]
    seen: dict[tuple[str, str], int] = {}
    slots: dict[tuple[str, int], dict[str, Finding]] = {}
    for f in analysis.findings:
        n = seen.get((f.run, f.mode), 0)
        seen[(f.run, f.mode)] = n + 1
        slots.setdefault((f.mode, n), {})[f.run] = f
    extra = [r for f in analysis.findings if (r := f.run) not in runs]
    order = runs + sorted(set(extra))
    return [
        MergedFinding(mode, tuple((run, by_run.get(run)) for run in order))
        for (mode, _), by_run in slots.items()
    ]
