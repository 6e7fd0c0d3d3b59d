"""What-if results: each counterfactual's predicted iteration time, what it saves, and
how sure the replay is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from syncpace.analysis.replay.engine import Change, Replayed, run
from syncpace.analysis.replay.program import Program


@dataclass(frozen=True)
class Outcome:
    """One counterfactual against the plain replay of the same steps.

    ``saving`` is the iteration time saved as a share of the plain replay's mean;
    ``error`` is how far that share can be off by the replay's own account: the plain
    replay's error against the measured iterations plus twice the standard error of
    the mean saving, the smaller of two estimates that each hold: paired over the
    steps (noise common to the plain and the changed replay cancels) and of the
    counterfactual's own steps, counted over the steps it changed (a saving
    concentrated in a few steps, a one-off stall, is no less certain for it: the
    steps it left replay as before). ``cause`` links it to a finding's mode (empty
    for generic rows).
    """

    name: str
    description: str
    iteration_ns: float
    saving_ns: float
    saving: float
    error: float
    cause: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "cause": self.cause,
            "iteration_ms": round(self.iteration_ns / 1e6, 4),
            "saving_ms": round(self.saving_ns / 1e6, 4),
            "saving": round(self.saving, 4),
            "error": round(self.error, 4),
            **({"detail": self.detail} if self.detail else {}),
        }


@dataclass(frozen=True)
class Baseline:
    """The plain replay of a program against what was measured."""

    measured_ns: float
    replayed_ns: float
    step_error_p90: float
    steps: int
    violations: int
    unresolved: int
    per_step: np.ndarray = field(repr=False)

    @property
    def error(self) -> float:
        """Relative error of the replayed mean iteration time (signed)."""
        return self.replayed_ns / self.measured_ns - 1 if self.measured_ns > 0 else 0.0


def baseline(prog: Program) -> Baseline:
    plain = run(prog)
    rel = np.abs(plain.iteration_ns / np.where(prog.measured > 0, prog.measured, np.nan) - 1)
    known = ~np.isnan(rel)
    return Baseline(
        measured_ns=float(prog.measured.mean()) if len(prog.measured) else 0.0,
        replayed_ns=plain.mean_ns,
        step_error_p90=float(np.quantile(rel[known], 0.9)) if known.any() else 0.0,
        steps=len(prog.steps),
        violations=prog.violations,
        unresolved=plain.unresolved,
        per_step=plain.iteration_ns,
    )


#: A step whose counterfactual replays within this share of the plain replay's mean
#: is one the change left as it was.
_UNCHANGED = 1e-4


def evaluate(
    prog: Program,
    base: Baseline,
    name: str,
    description: str,
    change: Change,
    cause: str = "",
    within: np.ndarray | None = None,
) -> Outcome:
    """``change`` replayed against the plain replay; ``within`` (per step of the
    program, in its order): only those steps count, the share of their own mean."""
    replayed: Replayed = run(prog, change)
    known = ~np.isnan(base.per_step) & ~np.isnan(replayed.iteration_ns)
    plain = base.replayed_ns
    if within is not None:
        known &= within
        plain = float(base.per_step[known].mean()) if known.any() else 0.0
    per_step = (base.per_step - replayed.iteration_ns)[known]
    saving_ns = float(per_step.mean()) if len(per_step) else 0.0
    steps = replayed.iteration_ns[known]
    n = len(steps)
    se = 0.0
    if n > 1:
        # the counterfactual's own variation counts only in the steps it changed: the
        # others replay as the plain replay does, to the nanosecond (a stall removed
        # from one step of n is uncertain by one step's variation over n, not sqrt(n))
        changed = max(int((np.abs(per_step) > _UNCHANGED * plain).sum()), 1)
        alone = float(steps.std(ddof=1)) * float(np.sqrt(changed)) / n
        se = min(float(per_step.std(ddof=1)) / float(np.sqrt(n)), alone)
    share = saving_ns / plain if plain > 0 else 0.0
    error = abs(base.error) + (2 * se / plain if plain > 0 else 0.0)
    detail = dict(replayed.pacing)
    if replayed.unresolved:
        detail["unresolved_dependencies"] = replayed.unresolved
    return Outcome(
        name=name,
        description=description,
        iteration_ns=replayed.mean_ns,
        saving_ns=saving_ns,
        saving=share,
        error=error,
        cause=cause,
        detail=detail,
    )


@dataclass(frozen=True)
class WhatIf:
    """The what-if table of one run: the plain replay and every counterfactual."""

    run: str
    base: Baseline
    rows: tuple[Outcome, ...]

    @property
    def replay_error(self) -> float:
        return self.base.error

    def row(self, name: str) -> Outcome | None:
        return next((r for r in self.rows if r.name == name), None)

    def to_json(self) -> dict[str, Any]:
        b = self.base
        return {
            "run": self.run,
            "replay": {
                "measured_iteration_ms": round(b.measured_ns / 1e6, 4),
                "replayed_iteration_ms": round(b.replayed_ns / 1e6, 4),
                "error": round(b.error, 5),
                "step_error_p90": round(b.step_error_p90, 5),
                "steps": b.steps,
                "model_violations": b.violations,
                "unresolved_dependencies": b.unresolved,
            },
            "rows": [r.to_json() for r in self.rows],
        }

    def table(self) -> str:
        """A plain-text table (what ``diagnose --what-if`` prints)."""
        b = self.base
        head = (
            f"{self.run}: measured {b.measured_ns / 1e6:.2f} ms per iteration, plain replay "
            f"{b.replayed_ns / 1e6:.2f} ms ({b.error:+.2%}; per step p90 {b.step_error_p90:.2%}, "
            f"{b.steps} steps)"
        )
        lines = [
            head,
            f"{'what if':<44} {'iteration ms':>12} {'saved ms':>9} {'saved':>7} {'±':>6}",
        ]
        for r in self.rows:
            lines.append(
                f"{r.description[:44]:<44} {r.iteration_ns / 1e6:>12.2f} {r.saving_ns / 1e6:>9.2f} "
                f"{r.saving:>7.1%} {r.error:>6.1%}"
            )
        return "\n".join(lines)
