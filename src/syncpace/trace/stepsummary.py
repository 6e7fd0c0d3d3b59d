"""Per-step summaries of a rank's events, made as the events are written.

In always-on mode a rank's events rotate out after minutes; its steps file and these
summaries stay for the whole run: per step the calls, bytes, time in calls, blocking
wait, the longest call and the calls that did not complete (``schema.SUMMARY``). They
are computed in the writer's background thread from the batches it writes, so the
training loop pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from syncpace.trace import schema
from syncpace.trace.segments import Stream

#: Statuses of a call that did not complete.
_NOT_COMPLETED = ("failed", "timed_out", "aborted")
#: A step is summarised once events of a step this much later have been written: calls
#: of a step may complete while the next one runs (asynchronous work).
SETTLE_STEPS = 2


class StepSummaries:
    """Accumulates per-step totals from event batches; writes a step's row once settled."""

    def __init__(self, path: Path, rank: int, open_stream: Callable[[Path], Stream]) -> None:
        self.rank = rank
        self.path = path
        self._stream = open_stream(path)
        # step -> [calls, bytes, comm_ns, wait_ns, longest_ns, failed]
        self._open: dict[int, list[int]] = {}
        self._latest = -1
        self.written = 0

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        if not batch.num_rows:
            return
        if isinstance(batch, pa.Table):
            batch = batch.combine_chunks().to_batches()[0]
        steps = batch.column("step").to_numpy()
        enter = batch.column("enter_ns").to_numpy()
        exit_ = batch.column("exit_ns").to_numpy()
        size = batch.column("bytes").to_numpy()
        wait_from = batch.column("wait_ns").to_numpy()
        status = batch.column("status").to_numpy(zero_copy_only=False)
        duration = np.where((exit_ >= 0) & (enter >= 0), exit_ - enter, 0)
        # blocked: from the wait's start to the call's end (the wait column is a time)
        wait = np.where((wait_from >= 0) & (exit_ >= wait_from), exit_ - wait_from, 0)
        failed = np.isin(status, _NOT_COMPLETED)
        keys, index = np.unique(steps, return_inverse=True)
        n = keys.size
        calls = np.bincount(index, minlength=n)
        totals = [
            np.bincount(index, weights=w, minlength=n).astype(np.int64)
            for w in (size, duration, wait)
        ]
        longest = np.zeros(n, dtype=np.int64)
        np.maximum.at(longest, index, duration)
        nfailed = np.bincount(index, weights=failed, minlength=n).astype(np.int64)
        for i, step in enumerate(keys.tolist()):
            row = self._open.setdefault(step, [0, 0, 0, 0, 0, 0])
            row[0] += int(calls[i])
            row[1] += int(totals[0][i])
            row[2] += int(totals[1][i])
            row[3] += int(totals[2][i])
            row[4] = max(row[4], int(longest[i]))
            row[5] += int(nfailed[i])
        self._latest = max(self._latest, int(keys[-1]))

    def flush(self, everything: bool = False) -> None:
        """Write the rows of settled steps (all of them when ``everything``)."""
        limit = None if everything else self._latest - SETTLE_STEPS
        done = sorted(s for s in self._open if limit is None or s <= limit)
        if not done:
            return
        rows = self._stream.rows
        for step in done:
            c = self._open.pop(step)
            rows.append((self.rank, step, c[0], c[1], c[2], c[3], c[4], c[5]))
        self._stream.drain(0)
        self.written += len(done)

    def close(self) -> None:
        self.flush(everything=True)
        self._stream.close()


def summary_path(directory: Path, rank: int) -> Path:
    return directory / f"{schema.rank_stem(rank)}{schema.SUMMARY_SUFFIX}"
