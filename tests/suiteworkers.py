"""How many workers the suite runs on with ``-n auto`` (CI's and the fast tier's way):
``tests/conftest.py`` asks :func:`auto_workers`. Which test runs where:
``tests/suiteschedule.py``."""

from __future__ import annotations

import os
import time

#: The suite's workers: at most this many, one per idle core.
MAX_WORKERS = 4
#: ``SYNCPACE_TEST_WORKERS=N`` sets the number of workers (0: the run stays in-process).
WORKERS_ENV = "SYNCPACE_TEST_WORKERS"


def idle_cores(interval_s: float = 0.5) -> float:
    """Cores nobody used over the last ``interval_s``, from ``/proc/stat``'s counters
    (the machine's count where it cannot be read)."""
    cores = len(os.sched_getaffinity(0))

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(interval_s)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return float(cores)
    if total1 <= total0:
        return float(cores)
    online = os.cpu_count() or cores
    return min(cores, online * (idle1 - idle0) / (total1 - total0))


def auto_workers() -> int:
    """``-n auto``: one worker per idle core, at most :data:`MAX_WORKERS`. Fewer than
    two idle cores run the tests in this process: a machine already busy with other
    work leaves no core to spare for a second worker."""
    wanted = os.environ.get(WORKERS_ENV)
    if wanted is not None:
        return max(0, int(wanted))
    workers = min(MAX_WORKERS, int(idle_cores() + 0.25))
    return workers if workers >= 2 else 0
