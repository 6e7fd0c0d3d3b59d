"""Online detection while the job runs: per-step summaries in, start/stop events out.

Pure (numpy only, no torch, no I/O): every rank feeds the same gathered summaries to
the same detector and reaches the same events, so no rank is special.
"""

from syncpace.monitor.config import MonitorConfig
from syncpace.monitor.detector import Detection, OnlineDetector, Window

__all__ = ["Detection", "MonitorConfig", "OnlineDetector", "Window"]
