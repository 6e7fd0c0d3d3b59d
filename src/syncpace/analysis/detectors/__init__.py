"""Detectors: each reads one run's metrics and the thresholds, and returns findings.

A detector is any callable ``(Context) -> list[Finding]``; :data:`DETECTORS` lists the
built-in ones in the order they run. They judge; they do not measure.
"""

from __future__ import annotations

from collections.abc import Callable

from syncpace.analysis.detectors import arrival, hang, latency, network, overlap, quality
from syncpace.analysis.detectors.context import Context
from syncpace.analysis.findings import Finding

Detector = Callable[[Context], list[Finding]]

DETECTORS: tuple[Detector, ...] = (
    hang.hang_or_desync,
    quality.incomplete_trace,
    quality.insufficient_data,
    quality.clock_uncertainty,
    arrival.stragglers_and_locality,
    arrival.stalls,
    arrival.sync_amplification,
    network.fabric_contention,
    network.slow_link,
    latency.latency_bound,
    network.bandwidth_bound,
    overlap.poor_overlap,
    overlap.comm_dominated,
)

__all__ = ["DETECTORS", "Context", "Detector"]
