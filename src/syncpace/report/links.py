"""Link counters of a run directory, as the report reads them: the analysis's
(:mod:`syncpace.analysis.links`), where the contention finding names its source."""

from __future__ import annotations

from syncpace.analysis.links import (
    LinkLoad,
    busiest_links,
    link_name,
    link_series,
    run_window,
    window_series,
)

__all__ = ["LinkLoad", "busiest_links", "link_name", "link_series", "run_window", "window_series"]
