"""The trace format: schema, per-rank writer, validating reader and summary.

A contract apart from the runtime that writes it: nothing here imports torch, the
in-job runtime (:mod:`syncpace.capture`) or the command line.
"""

from syncpace.trace.reader import Trace, load_trace
from syncpace.trace.writer import RankTraceWriter

__all__ = ["RankTraceWriter", "Trace", "load_trace"]
