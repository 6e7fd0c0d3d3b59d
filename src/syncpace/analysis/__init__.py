"""Analysis: trace -> metrics -> diagnosis. Measurement lives apart from judgement.

``analyze(run_dirs)`` is the one entry point most callers need.
"""

from syncpace.analysis.api import Analysis, analyze, find_hang
from syncpace.analysis.comparison import RunComparison
from syncpace.analysis.findings import MODES, QUALITY_MODES, STOPPED, SYMPTOMS, Finding, Severity
from syncpace.analysis.metrics import RunMetrics, compute_metrics
from syncpace.analysis.modes import Mode, Role
from syncpace.analysis.thresholds import Thresholds

__all__ = [
    "MODES",
    "QUALITY_MODES",
    "STOPPED",
    "SYMPTOMS",
    "Analysis",
    "Finding",
    "Mode",
    "RunComparison",
    "Role",
    "RunMetrics",
    "Severity",
    "Thresholds",
    "analyze",
    "compute_metrics",
    "find_hang",
]
