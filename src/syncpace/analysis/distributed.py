"""The streaming plan on a Dask cluster: for traces larger than one machine.

The stages of :mod:`syncpace.analysis.streaming` are plain functions over picklable
values, so a cluster runs them as they are, over the per-rank files on storage every
worker reaches (the run directory on a shared file system):

1. **scan**: one task per rank (:func:`syncpace.trace.chunks.scan_rank`): validate its
   files to their end; the scans (steps, account, index of batches) come back;
2. **windows**: one task per window of steps
   (:func:`~syncpace.analysis.streaming.window_partial`), each reading the batches of
   its steps from the index (the scans are sent to every worker once, without their
   steps); each rank's call before a window comes from the scans' per-step tails;
3. **finish** on the client (:func:`~syncpace.analysis.streaming.finish`), as in one
   process.

The result equals :func:`~syncpace.analysis.streaming.stream_metrics` and
:func:`~syncpace.analysis.metrics.compute_metrics` (tests compare them exactly). Dask
is an optional dependency (the ``scale`` extra): this module imports it lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syncpace.analysis.metrics import RunMetrics, compute_metrics
from syncpace.analysis.streaming import (
    WINDOW_EVENTS,
    base_trace,
    finish,
    needs_whole_run,
    plan,
    window_partial,
)
from syncpace.errors import ConfigError
from syncpace.trace.chunks import scan_rank, segments
from syncpace.trace.reader import load_trace, read_metadata


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
    ranks = index.ranks
    rotated = segments(index)
    n = len(ranks)
    scans = client.gather(client.map(scan_rank, [index] * n, ranks, [rotated] * n, pure=False))
    p = plan(index, scans, warmup_steps=warmup_steps, window_events=window_events)
    light = client.scatter(p.light(), broadcast=True)
    world, w = index.world_size, len(p.windows)
    futures = client.map(
        window_partial,
        [light] * w,
        [world] * w,
        [p.first] * w,
        list(p.windows),
        [None] * w,
        [p.context] * w,
        pure=False,
    )
    parts = client.gather(futures)  # in window order
    return finish(p, parts, base_trace(p))


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
