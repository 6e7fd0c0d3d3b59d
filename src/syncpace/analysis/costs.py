"""The cost model, said once: what each cause's cost is, and how the costs combine.

A cause's cost is what removing that cause *alone* saves in a replay of the run, as a
share of the run's own replayed iteration (its finding's ``cost`` is that what-if row's
``saving``). Causes interact: a straggler's late arrivals and a slow link's long
transfers can hide behind each other, so removing one may also remove part of another
(the costs *overlap*, and their sum is more than removing both saves), or each may hide
the other (together they save more than the sum). The replay removes all causes at once
too, so the run's account states the together figure beside each cause alone, and how
they relate, in words: "together 65%: straggler alone 16%, fabric contention alone
51%; they overlap". Symptoms (network busy, exposed communication) are bounds that
include the causes, never added to them.

The same cause's cost in two runs is each run's own saving against its own iteration:
a run whose iterations are longer (paced, contended) or whose cause weighs more
differs, and :func:`across_runs` says so with the milliseconds behind each share.

One rule maps a cost to a severity, for every finding and for the verdict alike
(:func:`severity`): the saving less the replay's own error (what the saving is at
least) against ``critical_cost`` and ``warning_cost`` (the reporting threshold: the
verdict names every cause at or above it; below it a cause is info).
:func:`syncpace.analysis.diagnosis.replay_floor` holds the findings to it: a cause whose
replayed saving reaches the reporting threshold is reported at the severity it maps to
or above, whatever its detector's own test said.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from syncpace.analysis import modes
from syncpace.analysis.findings import Finding, Severity
from syncpace.analysis.modes import Role
from syncpace.analysis.replay.whatif import Outcome, WhatIf
from syncpace.analysis.thresholds import Thresholds

Relation = Literal["one", "add", "overlap", "compound"]


def severity(cost: float, error: float | None, th: Thresholds) -> Severity:
    """The one rule from a cost (a share of the iteration) to a severity: the cost less
    ``error`` (the replay's, by its own account; none for a measured cost), so a saving
    of 2.4 % +- 1.5 % is no warning."""
    floor = max(0.0, cost - (error or 0.0))
    if floor >= th.critical_cost:
        return Severity.CRITICAL
    if floor >= th.warning_cost:
        return Severity.WARNING
    return Severity.INFO


def reported(cost: float, error: float | None, th: Thresholds) -> bool:
    """Whether a cause costing this must be reported (a finding the verdict names): it
    maps to a warning or more. Below the reporting threshold a replayed saving is
    within what jitter-free ideals and the replay's own noise give any run."""
    return severity(cost, error, th) >= Severity.WARNING


def cause_rows(rows: Sequence[Outcome]) -> list[Outcome]:
    """The what-if rows that remove a cause: those naming a mode whose role is a cause
    (generic rows, bounds such as "ideal overlap" or "every link at the run's best
    rate", name none)."""
    return [
        r
        for r in rows
        if r.cause and modes.is_registered(r.cause) and modes.has_role(r.cause, Role.CAUSE)
    ]


@dataclass(frozen=True)
class CauseCost:
    """One cause's saving alone (or all causes' together) in a run's replay."""

    mode: str
    saving: float
    saving_ns: float
    error: float
    what_if: str  # the what-if row's description

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "saving": round(self.saving, 4),
            "saving_ms": round(self.saving_ns / 1e6, 4),
            "error": round(self.error, 4),
            "what_if": self.what_if,
        }


@dataclass(frozen=True)
class CostAccount:
    """A run's causes, each alone and all together, against its replayed iteration."""

    run: str
    iteration_ns: float
    causes: tuple[CauseCost, ...]
    together: CauseCost | None
    symptoms: tuple[CauseCost, ...] = ()

    @property
    def total_alone(self) -> float:
        return sum(c.saving for c in self.causes)

    @property
    def relation(self) -> Relation:
        """How the causes' costs combine: ``add`` (the sum is what removing all saves,
        within the replay's error), ``overlap`` (the sum is more), ``compound`` (less)."""
        if self.together is None or len(self.causes) < 2:
            return "one"
        gap = self.total_alone - self.together.saving
        slack = self.together.error + max(c.error for c in self.causes)
        if abs(gap) <= slack:
            return "add"
        return "overlap" if gap > 0 else "compound"

    def text(self, symptoms: bool = True) -> str:
        """The account in one sentence ("" without a cause); ``symptoms``: with the
        symptoms' figures, said not to add to the causes."""
        if not self.causes:
            return ""
        alone = ", ".join(
            f"{modes.get(c.mode).title.lower()} alone {_pct(c.saving)}" for c in self.causes
        )
        of = f"of {_ms(self.iteration_ns)}"
        if self.together is None or len(self.causes) < 2:
            c = self.causes[0]
            text = f"removing it saves {_pct(c.saving)} ({_ms(c.saving_ns)} {of})"
        else:
            t = self.together
            words = {
                "add": "they add up",
                "overlap": f"they overlap: removing one also removes part of another, so the "
                f"shares alone (sum {_pct(self.total_alone)}) do not add",
                "compound": f"each hides part of the other: together they save more than "
                f"the shares alone (sum {_pct(self.total_alone)})",
            }[self.relation]
            text = f"together {_pct(t.saving)} ({_ms(t.saving_ns)} {of}): {alone}; {words}"
        if self.symptoms and symptoms:
            shown = ", ".join(
                f"{modes.get(s.mode).title.lower()} {_pct(s.saving)} with {s.what_if}"
                for s in self.symptoms
            )
            text += f"; symptoms of these causes, not added to them: {shown}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "iteration_ms": round(self.iteration_ns / 1e6, 4),
            "causes": [c.to_json() for c in self.causes],
            "together": self.together.to_json() if self.together is not None else None,
            "relation": self.relation,
            "symptoms": [s.to_json() for s in self.symptoms],
            "text": self.text(),
        }


def cost_account(findings: Sequence[Finding], table: WhatIf | None) -> CostAccount | None:
    """The account of one run from its findings and what-if table (the same replays:
    a finding's cost is its row's saving); ``None`` without a replay."""
    if table is None:
        return None
    causes, symptoms = [], []
    for f in findings:
        row = _row(f, table)
        if row is None:
            continue
        what_if = row.description
        if abs(f.cost - row.saving) >= 5e-4:  # the finding's cost is clipped to 0..1
            what_if += f" (the replay's saving: {_pct(row.saving)})"
        entry = CauseCost(f.mode, f.cost, row.saving_ns, row.error, what_if)
        symptom = f.symptom or modes.has_role(f.mode, Role.SYMPTOM)
        (symptoms if symptom else causes).append(entry)
    causes.sort(key=lambda c: -c.saving)
    all_row = table.row("all")
    together = (
        CauseCost("", all_row.saving, all_row.saving_ns, all_row.error, all_row.description)
        if all_row is not None and len(causes) > 1
        else None
    )
    return CostAccount(table.run, table.base.replayed_ns, tuple(causes), together, tuple(symptoms))


def _row(f: Finding, table: WhatIf) -> Outcome | None:
    counterfactual = f.evidence.get("counterfactual")
    if f.cost_basis != "replay" or not isinstance(counterfactual, dict):
        return None
    return table.row(str(counterfactual.get("name")))


def across_runs(
    accounts: Sequence[CostAccount | None],
    paced: Sequence[bool] = (),
    names: Mapping[str, str] | None = None,
) -> list[str]:
    """For each cause found in several runs at costs further apart than the replays'
    errors: why, in one line (each share is that run's own saving against that run's
    own iteration, with the milliseconds behind it). ``names``: run -> name to print."""
    names = names or {}
    found = [a for a in accounts if a is not None]
    pacing = {a.run: p for a, p in zip(accounts, paced, strict=False) if a is not None}
    out = []
    for mode in dict.fromkeys(c.mode for a in found for c in a.causes):
        seen = [(a, c) for a in found for c in a.causes if c.mode == mode]
        if len(seen) < 2:
            continue
        lo = min(seen, key=lambda ac: ac[1].saving)
        hi = max(seen, key=lambda ac: ac[1].saving)
        if hi[1].saving - lo[1].saving <= hi[1].error + lo[1].error:
            continue
        each = ", ".join(
            f"{_pct(c.saving)} of {names.get(a.run, a.run)}'s {_ms(a.iteration_ns)} "
            f"({_ms(c.saving_ns)}{_PACED * pacing.get(a.run, False)})"
            for a, c in seen
        )
        out.append(
            f"{modes.get(mode).title}: {each} — each run's own saving against its own iteration"
        )
    return out


_PACED = "; paced: its iterations include the pacer's delays"


def _pct(share: float) -> str:
    """As the human outputs write shares: '41%', '8.5%'."""
    return f"{share * 100:.0f}%" if abs(share) >= 0.1 or share == 0 else f"{share * 100:.1f}%"


def _ms(ns: float) -> str:
    if not math.isfinite(ns):
        return "?"
    return f"{ns / 1e6:.3g} ms" if ns >= 1e6 else f"{ns / 1e3:.3g} µs"
