"""Per-rank trace writer: append-only Arrow IPC streams, bounded memory, periodic flush.

Rows are appended to lock-free deques on the hot path (``deque.append`` is atomic)
and turned into Arrow record batches by a background thread. Each batch is written
with unbuffered OS writes, so a SIGKILL leaves the file readable up to the last
flushed batch; ``close`` writes the end-of-stream marker.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from syncpace.trace import schema

log = logging.getLogger("syncpace")

EventRow = tuple  # columns of schema.EVENTS, timestamps on the local clock
StepRow = tuple  # columns of schema.STEPS, timestamps on the local clock


class _Stream:
    """One Arrow IPC stream file fed from a deque of row tuples."""

    def __init__(self, path: Path, arrow_schema: pa.Schema, time_columns: tuple[str, ...]):
        self.path = path
        self.schema = arrow_schema
        self.rows: deque[tuple] = deque()
        self._time_idx = [arrow_schema.get_field_index(c) for c in time_columns]
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, arrow_schema)
        # The schema reaches the file only with the first batch: an empty one puts it
        # there now, so a rank killed before its first flush still leaves a valid stream.
        self._writer.write_batch(pa.RecordBatch.from_pylist([], schema=arrow_schema))
        self.written = 0

    def drain(self, offset_ns: int) -> None:
        n = len(self.rows)
        if n == 0:
            return
        rows = [self.rows.popleft() for _ in range(n)]
        columns = list(zip(*rows, strict=True))
        arrays = []
        for i, field in enumerate(self.schema):
            if i in self._time_idx:
                values = np.fromiter(columns[i], dtype=np.int64, count=n)
                # -1 marks "never observed"; it must stay -1 after alignment.
                values = np.where(values >= 0, values + offset_ns, values)
                arrays.append(pa.array(values, type=field.type))
            else:
                arrays.append(pa.array(columns[i], type=field.type))
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        self.written += n

    def close(self) -> None:
        self._writer.close()
        self._sink.close()


class RankTraceWriter:
    """Writes one rank's events, steps and metadata into a run directory."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        rank: int,
        meta: dict[str, Any],
        *,
        flush_interval_s: float = 1.0,
        max_buffered: int = 1_000_000,
        offset_ns: Callable[[], int] = lambda: 0,
    ) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        stem = schema.rank_stem(rank)
        self.meta_path = self.dir / f"{stem}{schema.META_SUFFIX}"
        self.meta = dict(meta)
        self.meta.setdefault("schema", schema.SCHEMA_NAME)
        self.meta.setdefault("schema_version", schema.SCHEMA_VERSION)
        self.meta["rank"] = rank
        self.meta.setdefault("finished", False)
        self.meta.setdefault("dropped_events", 0)
        self._events = _Stream(
            self.dir / f"{stem}{schema.EVENTS_SUFFIX}",
            schema.EVENTS,
            ("enter_ns", "exit_ns", "wait_ns"),
        )
        self._steps = _Stream(
            self.dir / f"{stem}{schema.STEPS_SUFFIX}", schema.STEPS, ("start_ns", "end_ns")
        )
        self._max_buffered = max_buffered
        self._offset_ns = offset_ns
        self._interval = flush_interval_s
        self._lock = threading.Lock()  # serialises drains and meta rewrites, not appends
        self._closed = False
        self._wake = threading.Event()
        self.dropped = 0
        self.write_meta()
        self._thread = threading.Thread(target=self._run, name="syncpace-flush", daemon=True)
        self._thread.start()

    # Hot path -----------------------------------------------------------------
    def add_event(self, row: EventRow) -> None:
        rows = self._events.rows
        if len(rows) >= self._max_buffered:
            self.dropped += 1
            self._wake.set()
            return
        rows.append(row)

    def add_step(self, row: StepRow) -> None:
        self._steps.rows.append(row)

    # Background ---------------------------------------------------------------
    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self.flush()
            except Exception:  # the job must not notice: log once, stop writing
                log.exception("syncpace: trace flush failed; tracing stops for this rank")
                self._closed = True

    def flush(self) -> None:
        with self._lock:
            if self._events is None:
                return
            offset = self._offset_ns()
            self._events.drain(offset)
            self._steps.drain(offset)
            if self.dropped != self.meta["dropped_events"]:
                self.meta["dropped_events"] = self.dropped
                self._write_meta_locked()

    # Metadata -----------------------------------------------------------------
    def update_meta(self, **fields: Any) -> None:
        with self._lock:
            self.meta.update(fields)
            self._write_meta_locked()

    def write_meta(self) -> None:
        with self._lock:
            self._write_meta_locked()

    def _write_meta_locked(self) -> None:
        tmp = self.meta_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.meta, indent=1, sort_keys=True, default=str))
        os.replace(tmp, self.meta_path)

    def close(self, **final_meta: Any) -> None:
        """Flush everything, end both streams and mark the metadata finished. Idempotent."""
        if self._events is None:
            return
        self._closed = True
        self._wake.set()
        self.flush()
        with self._lock:
            self._events.close()
            self._steps.close()
            self.meta.update(final_meta)
            self.meta["finished"] = True
            self.meta["events_written"] = self._events.written
            self.meta["steps_written"] = self._steps.written
            self.meta["dropped_events"] = self.dropped
            self._write_meta_locked()
            self._events = None  # type: ignore[assignment]
            self._steps = None  # type: ignore[assignment]
