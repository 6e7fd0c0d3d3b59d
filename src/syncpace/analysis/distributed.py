"""The streaming plan on a Dask cluster: for traces larger than one machine.

The stages of :mod:`syncpace.analysis.streaming` are plain functions over picklable
values, so a cluster runs them as they are, over the per-rank files on storage every
worker reaches (the run directory on a shared file system):

1. **scan**: one task per block of ranks (:func:`syncpace.trace.read.index.scan_rank`):
   validate their files to their end; the scans (steps, account, index of batches)
   come back;
2. **windows**: one task per run of consecutive windows of steps
   (:func:`~syncpace.analysis.streaming.window_partial`), each reading the batches of
   its steps from the index, a batch decoded once per run (the scans are sent to
   every worker once, without their steps); each rank's call before a window comes
   from the scans' per-step tails;
3. **finish** on the client (:func:`~syncpace.analysis.streaming.finish`), as in one
   process.

The result equals :func:`~syncpace.analysis.streaming.stream_metrics` and
:func:`~syncpace.analysis.metrics.compute_metrics` (tests compare them exactly). Dask
is an optional dependency (the ``scale`` extra): this module imports it lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syncpace.analysis import timebase
from syncpace.analysis.metrics import RunMetrics, compute_metrics
from syncpace.analysis.streaming import (
    WINDOW_EVENTS,
    Partial,
    base_trace,
    finish,
    needs_whole_run,
    plan,
    stream_metrics,
    window_partial,
)
from syncpace.errors import ConfigError
from syncpace.trace.read.index import RankScan, scan_rank
from syncpace.trace.read.meta import TraceMeta, read_metadata, segment_files
from syncpace.trace.read.window import BatchCache
from syncpace.trace.reader import load_trace


def dask_metrics(
    path: str | Path,
    client: Any,
    *,
    warmup_steps: int = 1,
    window_events: int = WINDOW_EVENTS,
) -> RunMetrics:
    """Measure the run directory ``path`` on the Dask cluster of ``client`` (a
    ``distributed.Client``): scans and windows as tasks, the finish here."""
    index = read_metadata(path)
    if needs_whole_run(index):  # rotated segments or a crash journal: loaded whole, here
        return compute_metrics(load_trace(path), warmup_steps=warmup_steps)
    if timebase.declared(index.meta):
        # A window on a worker looks back at each rank's call before it through the
        # scans, which keep it in host time only: device-timed runs stream here, window
        # after window, each carrying the device time of the call before the next.
        return stream_metrics(path, warmup_steps=warmup_steps, window_events=window_events)[0]
    ranks = index.ranks
    # The index (every rank's metadata: ~100 bytes a rank) goes to each worker once, not
    # with each task; ranks are scanned in blocks, so the scheduler holds a few dozen
    # tasks, not one per rank (with 4,096 ranks, per-rank tasks each carrying the index
    # made the workers hold gigabytes of copies of it).
    shared = client.scatter((index, segment_files(index.path)), broadcast=True)
    blocks = [ranks[i : i + SCAN_BLOCK] for i in range(0, len(ranks), SCAN_BLOCK)]
    scanned = client.gather(client.map(_scan_block, [shared] * len(blocks), blocks, pure=False))
    scans = [scan for block in scanned for scan in block]
    p = plan(index, scans, warmup_steps=warmup_steps, window_events=window_events)
    light = client.scatter((p.light(), index.world_size, p.first, p.context), broadcast=True)
    # Consecutive windows in one task share a cache of decoded batches: a batch spans
    # several windows when there are thousands of ranks, and each window decoding it
    # again cost most of the time. Two runs of windows per worker keep them all busy.
    workers = max(1, len(client.scheduler_info().get("workers", {})))
    runs = _runs_of(list(p.windows), 2 * workers)
    futures = client.map(_window_run, [light] * len(runs), runs, pure=False)
    parts = [part for run in client.gather(futures) for part in run]  # in window order
    return finish(p, parts, base_trace(p))


def _runs_of(windows: list[tuple[int, int]], count: int) -> list[list[tuple[int, int]]]:
    """``windows`` cut into at most ``count`` consecutive runs of about equal length."""
    if not windows:  # a run without events: nothing to read
        return []
    count = max(1, min(count, len(windows)))
    size = -(-len(windows) // count)
    return [windows[i : i + size] for i in range(0, len(windows), size)]


def _window_run(shared: tuple[Any, ...], windows: list[tuple[int, int]]) -> list[Partial]:
    scans, world_size, first, context = shared
    cache = BatchCache()
    return [window_partial(scans, world_size, first, w, cache, context) for w in windows]


#: Ranks scanned by one task.
SCAN_BLOCK = 64


def _scan_block(
    shared: tuple[TraceMeta, dict[int, list[Path]]], ranks: list[int]
) -> list[RankScan]:
    index, rotated = shared
    return [scan_rank(index, rank, rotated) for rank in ranks]


def local_client(workers: int = 2) -> Any:
    """A ``distributed.Client`` on a local cluster of ``workers`` processes, one thread
    each (the lazy import: Dask is the optional ``scale`` extra)."""
    try:
        from distributed import Client, LocalCluster  # noqa: PLC0415 - optional extra
    except ImportError as exc:
        raise ConfigError(
            "the distributed analysis needs Dask: pip install 'syncpace[scale]'"
        ) from exc
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
    )
    return Client(cluster)
