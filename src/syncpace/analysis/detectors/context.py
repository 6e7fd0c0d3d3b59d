"""What every detector sees: one run's metrics, the thresholds, the run's replay, and
shared helpers."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from syncpace.analysis import costs
from syncpace.analysis.detectors import nominal
from syncpace.analysis.findings import Finding, Severity
from syncpace.analysis.metrics import RunMetrics
from syncpace.analysis.replay import Change, PacerFactory, Program
from syncpace.analysis.replay.whatif import Baseline, Outcome, baseline, evaluate
from syncpace.analysis.thresholds import Thresholds


@dataclass(frozen=True)
class Context:
    metrics: RunMetrics
    thresholds: Thresholds
    pacer: PacerFactory | None = None
    #: counterfactuals evaluated so far, by name: (outcome, change)
    replays: dict[str, tuple[Outcome, Change]] = field(default_factory=dict, compare=False)
    _memo: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def iteration_ns(self) -> float:
        return self.metrics.iteration_ns

    @property
    def program(self) -> Program | None:
        return self.metrics.program

    @property
    def base(self) -> Baseline | None:
        """The plain replay (once per run), or None without a program."""
        if self.program is None:
            return None
        if "base" not in self._memo:
            self._memo["base"] = baseline(self.program)
        return self._memo["base"]

    def memo(self, key: str, compute: Any) -> Any:
        """A per-run value computed once and shared between detectors."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def counterfactual(
        self, name: str, description: str, change: Any, cause: str = "", *, bytes_kept: bool = True
    ) -> Outcome | None:
        """Replay the run with ``change`` (a Change or a callable making one from the
        program); the outcome is kept for the what-if table. None without a replay.
        A change that moves the same bytes (``bytes_kept``) makes no transfer faster
        than the links' known capacity allows (:func:`nominal.ceiling`)."""
        prog, base = self.program, self.base
        if prog is None or base is None or base.measured_ns <= 0:
            return None
        if name not in self.replays:
            made = change(prog) if callable(change) else change
            if bytes_kept:
                made = nominal.held_to(
                    made, prog, self.memo("ceiling", lambda: nominal.ceiling(self, prog))
                )
            self.replays[name] = (evaluate(prog, base, name, description, made, cause), made)
        return self.replays[name][0]

    def claim(self, name: str, by: str) -> None:
        """The counterfactual ``name`` removes what ``by`` costs (a finding left out as
        the same cause as ``by``'s, a variation that is ``by``'s own): its what-if row
        names ``by`` as its cause, so the replay's floor holds ``by`` to it."""
        if name in self.replays:
            row, change = self.replays[name]
            self.replays[name] = (replace(row, cause=by), change)

    def severity(self, cost: float, error: float | None = None) -> Severity:
        """The one rule (:func:`syncpace.analysis.costs.severity`)."""
        return costs.severity(cost, error, self.thresholds)

    def nodes_of(self, ranks: list[int] | tuple[int, ...]) -> tuple[str, ...]:
        place = self.metrics.placement
        names = place.filter(place["rank"].is_in(list(ranks)))["node"].unique().sort()
        return tuple(names.to_list())

    def finding(
        self,
        mode: str,
        cost: float,
        confidence: float,
        summary: str,
        *,
        replay: Outcome | None = None,
        **kw: Any,
    ) -> Finding:
        """A finding whose severity follows from its cost: the replay's saving when
        ``replay`` is given (its counterfactual goes into the evidence), else ``cost``.
        With a replay the severity is what the saving is at least, by the replay's own
        error: a saving of 2.4 % +- 1.5 % is no warning."""
        basis = "measured"
        error = None
        if replay is not None:
            cost, error, basis = replay.saving, replay.error, "replay"
            kw["evidence"] = {**kw.get("evidence", {}), "counterfactual": replay.to_json()}
        cost = max(0.0, min(1.0, cost))
        return Finding(
            mode=mode,
            severity=self.severity(cost, error),
            confidence=max(0.0, min(1.0, confidence)),
            summary=summary,
            cost=cost,
            run=self.metrics.run,
            cost_error=error,
            cost_basis=basis,
            **kw,
        )


def confidence_of(value: float, threshold: float) -> float:
    """``value / (2 * threshold)`` capped at 1: full confidence at twice the threshold;
    a zero threshold (every value passes it) gives full confidence, not a division by 0."""
    return 1.0 if threshold <= 0 else min(1.0, value / (2 * threshold))


def ms(ns: float) -> float:
    """Nanoseconds as milliseconds rounded for evidence."""
    return round(ns / 1e6, 4)


def fast_half(values: pl.Expr) -> pl.Expr:
    """The median of the values at or below the median: a baseline of the faster half,
    which a slow half of the ranks cannot move."""
    return values.filter(values <= values.median()).median()


def fast_noise(frame: pl.DataFrame, value: str, base: str, mid: str) -> float:
    """The median absolute deviation of the fast half's values (those at or below the
    median ``mid`` of their group) from its baseline ``base``: the spread of the ranks
    that are not slow, which a slow half does not inflate."""
    fast = frame.filter(pl.col(value) <= pl.col(mid))
    if fast.height == 0:
        return 0.0
    return float(fast.select((pl.col(value) - pl.col(base)).abs().median()).item() or 0.0)
