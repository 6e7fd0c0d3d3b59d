"""Writes one host's files: its counter series (Arrow IPC stream) and its facts (JSON).

The sampler hands over rows as three parallel sequences (time on the host's local
clock, series index, value) plus the series table; timestamps are shifted to rank 0's
clock here, with the offset in force at the flush, as the rank writer does. Each batch
is compressed (zstd: the series' names repeat, counters change slowly) and written with
unbuffered OS writes, so a killed sampler leaves a file readable up to its last batch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from syncpace.trace import schema

Series = tuple[str, str, int, str]  # source, device, port, counter


def host_paths(run_dir: str | os.PathLike[str], host: str) -> tuple[Path, Path]:
    """(meta, counters) file paths of ``host`` in ``run_dir``."""
    stem = Path(run_dir) / schema.host_stem(host)
    return Path(f"{stem}{schema.HOST_META_SUFFIX}"), Path(f"{stem}{schema.COUNTERS_SUFFIX}")


def write_host_meta(path: Path, meta: dict[str, Any]) -> None:
    """Rewrite the host's facts atomically (temp file + rename)."""
    data = {"schema": schema.HOST_SCHEMA_NAME, "schema_version": schema.HOST_SCHEMA_VERSION}
    data.update(meta)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


class CountersWriter:
    """The ``host-H.counters.arrow`` stream of one host."""

    def __init__(self, path: Path, host: str) -> None:
        self.path = path
        self.host = host
        self.rows = 0
        self._sink = pa.OSFile(str(path), "wb")
        options = pa.ipc.IpcWriteOptions(compression="zstd")
        self._writer = pa.ipc.new_stream(self._sink, schema.COUNTERS, options=options)
        # an empty batch puts the schema in the file now: a sampler killed before its
        # first flush still leaves a valid stream
        self._writer.write_batch(pa.RecordBatch.from_pylist([], schema=schema.COUNTERS))

    def write(
        self,
        times: Sequence[int],
        index: Sequence[int],
        values: Sequence[int],
        series: Sequence[Series],
        offset_ns: int = 0,
    ) -> None:
        n = len(times)
        if n == 0:
            return
        idx = np.fromiter(index, dtype=np.int64, count=n)
        table = np.empty((len(series), 4), dtype=object)
        table[:] = series
        rows = table[idx]
        arrays = [
            pa.array(np.fromiter(times, dtype=np.int64, count=n) + offset_ns, pa.int64()),
            pa.array([self.host] * n, pa.string()),
            pa.array(rows[:, 0], pa.string()),
            pa.array(rows[:, 1], pa.string()),
            pa.array(rows[:, 2].astype(np.int32), pa.int32()),
            pa.array(rows[:, 3], pa.string()),
            pa.array(np.fromiter(values, dtype=np.int64, count=n), pa.int64()),
        ]
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema.COUNTERS))
        self.rows += n

    def close(self) -> None:
        self._writer.close()
        self._sink.close()
