"""One time origin for every time axis of a report: seconds since the run's first
collective analysed (the first enter of any rank into a collective after the warm-up).

Host counters, the fabric's link counters and the iterations' swimlanes are all on the
trace's clock (rank 0's, aligned to wall time), so one origin per run puts them on one
axis: a burst on a link and the iteration it slowed read at the same second.
"""

from __future__ import annotations

from syncpace.analysis import RunMetrics

#: What every time axis of a report measures, said once on the page.
ORIGIN = "seconds since each run's first collective analysed"
#: The title of every time axis.
AXIS = "time since the first collective (s)"


def origin_ns(run: RunMetrics) -> int:
    """The run's first collective analysed (ns, the trace's clock); its first iteration's
    start when it has no collective; 0 for an empty run."""
    for frame, column in ((run.instances, "first_enter"), (run.rank_steps, "start_ns")):
        if frame.height and column in frame.columns:
            first = frame[column].min()
            if isinstance(first, int):
                return first
    return 0
