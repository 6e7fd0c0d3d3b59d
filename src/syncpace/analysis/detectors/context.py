"""What every detector sees: one run's metrics, the thresholds, and shared helpers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from syncpace.analysis.findings import Finding, Severity, severity_for
from syncpace.analysis.metrics import RunMetrics
from syncpace.analysis.thresholds import Thresholds


@dataclass(frozen=True)
class Context:
    metrics: RunMetrics
    thresholds: Thresholds

    @property
    def iteration_ns(self) -> float:
        return self.metrics.iteration_ns

    def severity(self, cost: float) -> Severity:
        th = self.thresholds
        return severity_for(cost, th.critical_cost, th.warning_cost)

    def nodes_of(self, ranks: list[int] | tuple[int, ...]) -> tuple[str, ...]:
        place = self.metrics.placement
        names = place.filter(place["rank"].is_in(list(ranks)))["node"].unique().sort()
        return tuple(names.to_list())

    def finding(
        self, mode: str, cost: float, confidence: float, summary: str, **kw: Any
    ) -> Finding:
        """A finding whose severity follows from its cost."""
        return Finding(
            mode=mode,
            severity=self.severity(cost),
            confidence=max(0.0, min(1.0, confidence)),
            summary=summary,
            cost=max(0.0, cost),
            run=self.metrics.run,
            **kw,
        )


def confidence_of(value: float, threshold: float) -> float:
    """``value / (2 * threshold)`` capped at 1: full confidence at twice the threshold;
    a zero threshold (every value passes it) gives full confidence, not a division by 0."""
    return 1.0 if threshold <= 0 else min(1.0, value / (2 * threshold))


def ms(ns: float) -> float:
    """Nanoseconds as milliseconds rounded for evidence."""
    return round(ns / 1e6, 4)
