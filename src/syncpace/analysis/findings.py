"""What the diagnosis concludes: frozen findings with severity, confidence and evidence."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from syncpace.analysis import modes
from syncpace.analysis.modes import Role


class Severity(enum.IntEnum):
    """Ordered: ``info < warning < critical``."""

    INFO = 0
    WARNING = 1
    CRITICAL = 2

    def __str__(self) -> str:
        return self.name.lower()


# The modes and their properties are declared once, in the registry (modes.py); these
# constants of the built-in modes are kept because callers outside the package import
# them. Code in the package queries the registry, which also knows modes registered later.

#: The built-in failure modes, data-quality modes included.
MODES = modes.names(built_in=True)
#: Modes about the trace itself rather than the job: data-quality warnings.
QUALITY_MODES = modes.names(lambda m: m.role is Role.QUALITY, built_in=True)
#: Summary symptoms: they rank after a specific cause of the same severity and are
#: never the verdict's cause.
SYMPTOMS = modes.names(lambda m: m.role is Role.SYMPTOM, built_in=True)
#: A job that stopped (hung, or its ranks disagree): nothing else matters until it runs
#: again, so these rank first whatever else is found.
STOPPED = modes.names(lambda m: m.role is Role.STOPPED, built_in=True)


@dataclass(frozen=True)
class Finding:
    """One diagnosed cause.

    ``cost`` is the fraction of iteration time the cause takes: with a replay of the
    trace (``cost_basis == "replay"``), the iteration time a counterfactual replay
    saves when the cause is removed, as a share of the replayed iteration, and
    ``cost_error`` how far that share can be off by the replay's own account; without
    one, a share measured directly (``"measured"``). A cause's cost never exceeds the
    iteration. Findings rank by severity, then cost; a ``symptom`` ranks after causes.
    ``evidence`` holds plain numbers (JSON-able).

    Who: ``source`` names what causes it, when that is known apart from who suffers —
    hosts, then link directions by their one name (``host link h3→leaf1``,
    ``uplink leaf1→spine``: :func:`syncpace.analysis.links.link_name`), e.g. the host
    whose traffic crosses a shared link; ``ranks`` are the ranks the finding places it
    at (a straggler's late rank, the ranks a contended link delays) and ``nodes`` their
    hosts (all hosts of the ranks involved when ``ranks`` is empty).
    """

    mode: str
    severity: Severity
    confidence: float
    summary: str
    cost: float = 0.0
    ranks: tuple[int, ...] = ()
    nodes: tuple[str, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict)
    actions: tuple[str, ...] = ()
    run: str = ""
    cost_error: float | None = None
    cost_basis: str = "measured"
    symptom: bool = False
    source: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not modes.is_registered(self.mode):
            raise ValueError(f"unknown mode {self.mode!r}")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be in 0..1, got {self.confidence}")

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "severity": str(self.severity),
            "confidence": round(self.confidence, 3),
            "summary": self.summary,
            "cost": round(self.cost, 4),
            "cost_error": None if self.cost_error is None else round(self.cost_error, 4),
            "cost_basis": self.cost_basis,
            "symptom": self.symptom,
            "source": list(self.source),
            "ranks": list(self.ranks),
            "nodes": list(self.nodes),
            "evidence": self.evidence,
            "actions": list(self.actions),
            "run": self.run,
        }


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Severity first (it follows cost), then causes before symptoms, then cost."""
    return sorted(
        findings, key=lambda f: (-int(f.severity), f.symptom, -f.cost, -f.confidence, f.mode)
    )
