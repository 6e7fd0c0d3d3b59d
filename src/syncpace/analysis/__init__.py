"""Analysis: trace -> metrics -> diagnosis. Measurement lives apart from judgement.

``analyze(run_dirs)`` is the one entry point most callers need.
"""

from syncpace.analysis.api import Analysis, analyze, find_hang
from syncpace.analysis.findings import MODES, Finding, Severity
from syncpace.analysis.metrics import RunMetrics, compute_metrics
from syncpace.analysis.thresholds import Thresholds

__all__ = [
    "MODES",
    "Analysis",
    "Finding",
    "RunMetrics",
    "Severity",
    "Thresholds",
    "analyze",
    "find_hang",
    "compute_metrics",
]
