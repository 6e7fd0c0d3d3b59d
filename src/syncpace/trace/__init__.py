"""The trace format: schema, per-rank writer, validating reader and summary.

A contract apart from the runtime that writes it: nothing here imports torch, the
in-job runtime (:mod:`syncpace.capture`) or the command line.

The names below load on first use: a traced rank imports the writer alone, and the
reader's polars (most of a second of start-up in every rank) stays out of the job.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from syncpace.trace.reader import Trace, load_trace
    from syncpace.trace.writer import RankTraceWriter

_LAZY = {
    "Trace": "syncpace.trace.reader",
    "load_trace": "syncpace.trace.reader",
    "RankTraceWriter": "syncpace.trace.writer",
}

__all__ = ["RankTraceWriter", "Trace", "load_trace"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
