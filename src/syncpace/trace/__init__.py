"""The trace: schema, per-rank writer, reader, and the tracer that produces it."""

from syncpace.trace.reader import Trace, load_trace
from syncpace.trace.writer import RankTraceWriter

__all__ = ["RankTraceWriter", "Trace", "load_trace"]
