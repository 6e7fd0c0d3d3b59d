"""Per-rank trace writer: append-only Arrow IPC streams, bounded memory, periodic flush.

Without a journal, rows are appended to lock-free deques on the hot path
(``deque.append`` is atomic) and turned into Arrow record batches by a background
thread. Each batch is written with unbuffered OS writes, so a SIGKILL leaves the file
readable up to the last flushed batch; ``close`` writes the end-of-stream marker.

With a journal (``journal_slots > 0``, what the tracer uses), every row is packed into
the memory-mapped crash journal (:mod:`syncpace.trace.journal`) instead, and the
flusher turns the journal's new records into the same Arrow batches, each tagged with
the journal position it covers (and, like every batch, its checksum). A rank that dies
loses nothing but a record being packed at that instant; a clean close deletes the
journal. Rows that find the ring full fall back to the deques (kept, but not
crash-proof; counted in the metadata).

A write that fails (disk full, file system gone read-only) stops the writer, never
the job: one line is logged, later rows are counted as dropped, and the metadata
records ``write_error`` so the trace says why it ends early. The metadata file keeps
a reserve of trailing whitespace, so that last rewrite fits in place even when the
disk has no block left for a new file.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from syncpace.errors import TraceWriteError
from syncpace.trace import journal as jr
from syncpace.trace import schema
from syncpace.trace.columns import complete_event, complete_step
from syncpace.trace.segments import RotationPolicy, SegmentedEvents
from syncpace.trace.stepsummary import StepSummaries, summary_path

log = logging.getLogger("syncpace")

#: Tokens of calls without a journal slot start here, apart from the journal's entries.
_OWN_TOKENS = 1 << 46

#: Positions columns.EV, timestamps on the local clock; a row may stop at an older
#: version's last column (the rest read as not observed).
EventRow = tuple
StepRow = tuple  # positions columns.ST, timestamps on the local clock

#: Trailing whitespace after the metadata's JSON: room for an in-place rewrite.
META_RESERVE = 1024


def _encode_meta(meta: dict[str, Any]) -> bytes:
    """Strict JSON (non-finite floats become null, unknown objects their str), with the
    checksum of its content (:func:`meta_checksum`) under ``crc32``."""
    content = {k: v for k, v in meta.items() if k != schema.CHECKSUM_KEY}
    plain = msgspec.json.decode(msgspec.json.encode(content, enc_hook=str))
    plain[schema.CHECKSUM_KEY] = schema.meta_checksum(plain)
    return msgspec.json.format(msgspec.json.encode(plain, order="sorted"), indent=1)


def _reason(exc: OSError) -> str:
    """``No space left on device``: the system's words, also for Arrow's wrapped errors."""
    found = re.search(r"\[errno (\d+)\]", str(exc))
    if found:
        return os.strerror(int(found.group(1)))
    return exc.strerror or str(exc)


class _Stream:
    """One Arrow IPC stream file fed from a deque of row tuples."""

    def __init__(
        self,
        path: Path,
        arrow_schema: pa.Schema,
        time_columns: tuple[str, ...],
        complete: Callable[[tuple], tuple] = lambda row: row,
    ):
        self.path = path
        self._complete = complete  # a row of an older version's length made whole
        self.schema = arrow_schema
        self.rows: deque[tuple] = deque()
        self._time_idx = [arrow_schema.get_field_index(c) for c in time_columns]
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, arrow_schema)
        # The schema reaches the file only with the first batch: an empty one puts it
        # there now, so a rank killed before its first flush still leaves a valid stream.
        self._writer.write_batch(pa.RecordBatch.from_pylist([], schema=arrow_schema))
        self.written = 0

    def write_table(self, table: pa.Table, hi: int) -> pa.Table:
        """A batch made from the journal, tagged with the journal position it covers."""
        if table.num_rows:
            for batch in table.to_batches():
                self._writer.write_batch(
                    batch,
                    custom_metadata={
                        schema.CHECKSUM_KEY: schema.batch_checksum(batch),
                        schema.JOURNAL_HI_KEY: str(hi),
                    },
                )
            self.written += table.num_rows
        return table

    def drain(self, offset_ns: int) -> pa.RecordBatch | None:
        """Write the buffered rows as one batch, and return it (None when there were none)."""
        n = len(self.rows)
        if n == 0:
            return None
        rows = [self._complete(self.rows.popleft()) for _ in range(n)]
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
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._writer.write_batch(
            batch, custom_metadata={schema.CHECKSUM_KEY: schema.batch_checksum(batch)}
        )
        self.written += n
        return batch

    def size(self) -> int:
        return self._sink.tell()

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
        journal_slots: int = 0,
        inflight_slots: int = 4096,
        rotation: RotationPolicy | None = None,
        summaries: bool = False,
    ) -> None:
        self.dir = Path(run_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceWriteError(
                self.dir, f"cannot create the run directory: {_reason(exc)}"
            ) from exc
        stem = schema.rank_stem(rank)
        self.meta_path = self.dir / f"{stem}{schema.META_SUFFIX}"
        self.meta = dict(meta)
        self.meta.setdefault("schema", schema.SCHEMA_NAME)
        self.meta["schema_version"] = schema.SCHEMA_VERSION  # what this writer writes
        self.meta["rank"] = rank
        self.meta.setdefault("finished", False)
        self.meta.setdefault("dropped_events", 0)
        events_path = self.dir / f"{stem}{schema.EVENTS_SUFFIX}"

        def open_events(path: Path) -> _Stream:
            return _Stream(path, schema.EVENTS, schema.EVENT_TIME_COLUMNS, complete_event)

        self._summaries: StepSummaries | None = None
        try:
            self._events: _Stream | SegmentedEvents = (
                open_events(events_path)
                if rotation is None
                else SegmentedEvents(self.dir, rank, open_events, rotation)
            )
            self._steps = _Stream(
                self.dir / f"{stem}{schema.STEPS_SUFFIX}",
                schema.STEPS,
                schema.STEP_TIME_COLUMNS,
                complete_step,
            )
            if summaries:
                self._summaries = StepSummaries(
                    summary_path(self.dir, rank), rank, lambda p: _Stream(p, schema.SUMMARY, ())
                )
        except OSError as exc:
            raise TraceWriteError(
                getattr(exc, "filename", None) or events_path,
                f"cannot create the trace file: {_reason(exc)}",
            ) from exc
        self.rank = rank
        self._tokens = itertools.count(1)
        self.journal: jr.Journal | None = None
        if journal_slots > 0:
            try:
                self.journal = jr.Journal(
                    jr.journal_path(self.dir, rank),
                    rank,
                    ring_slots=journal_slots,
                    inflight_slots=inflight_slots,
                )
                self.meta["journal"] = {"slots": journal_slots, "inflight_slots": inflight_slots}
            except (OSError, ValueError) as exc:  # the trace still works, without the journal
                log.warning("syncpace: no crash journal for rank %d: %s", rank, exc)
        self._max_buffered = max_buffered
        self._offset_ns = offset_ns
        self._interval = flush_interval_s
        self._lock = threading.Lock()  # serialises drains and meta rewrites, not appends
        self._closed = False
        self._wake = threading.Event()
        self.dropped = 0
        #: Why writing stopped (disk full, read-only), once it has.
        self.write_error: str | None = None
        try:
            self.write_meta()
        except OSError as exc:
            raise TraceWriteError(self.meta_path, f"cannot write: {_reason(exc)}") from exc
        #: Called by every flush before it writes (``closing``: the trace is ending): a
        #: producer that completes rows off the hot path (device times) hands them over.
        self.before_flush: Callable[[bool], None] | None = None
        self._thread = threading.Thread(target=self._run, name="syncpace-flush", daemon=True)
        self._thread.start()

    # Hot path -----------------------------------------------------------------
    def begin(self, row: tuple) -> int:
        """A call entered (``row`` is its event without the exit): a token for
        :meth:`add_event` or :meth:`release`. A rank that dies before the call
        completes leaves it in the journal as ``pending``."""
        journal = self.journal
        if journal is not None:
            try:
                return journal.begin(row)
            except Exception:  # never into the job
                pass
        return ((_OWN_TOKENS + next(self._tokens)) << 16) | jr.NO_SLOT

    def release(self, token: int) -> None:
        """The call of ``token`` will not be recorded after all."""
        journal = self.journal
        if journal is not None and token & 0xFFFF != jr.NO_SLOT:
            try:
                journal.release(token)
            except Exception:  # closed meanwhile: nothing left to release
                pass

    def add_event(self, row: EventRow, token: int = jr.NO_SLOT) -> None:
        journal = self.journal
        if journal is not None:
            try:
                if journal.event(row, token):
                    return
            except Exception:  # a bad row: keep it in memory, the journal stays sound
                self.release(token)
        stream = self._events
        if stream is None:  # closed meanwhile (a late completion): nothing to add to
            return
        rows = stream.rows
        if len(rows) >= self._max_buffered:
            self.dropped += 1
            self._wake.set()
            return
        rows.append(row)

    def add_step(self, row: StepRow) -> None:
        journal = self.journal  # after a write error too: a dead rank's journal is read
        if journal is not None:
            try:
                if journal.step(row):
                    return
            except Exception:
                pass
        stream = self._steps
        if stream is not None and self.write_error is None:
            stream.rows.append(row)

    # Background ---------------------------------------------------------------
    def _run(self) -> None:
        # Flushes start on a fixed schedule (not an interval after the previous one
        # ended), so a row waits at most one interval plus the time to write its batch.
        deadline = time.monotonic() + self._interval
        while not self._closed:
            self._wake.wait(max(deadline - time.monotonic(), 0.0))
            self._wake.clear()
            deadline = max(deadline + self._interval, time.monotonic())
            try:
                self.flush()
            except Exception as exc:  # the job must not notice: log once, stop writing
                self._stop_writing(exc)

    def _stop_writing(self, exc: BaseException) -> None:
        """Writing failed: say so once, count what is lost from now on, record why."""
        reason = _reason(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        with self._lock:
            if self.write_error is not None or self._events is None:
                return
            self.write_error = reason
            self._closed = True
            self._max_buffered = 0  # every later event is counted as dropped
            self.dropped += len(self._events.rows)
            self._events.rows.clear()
            self._steps.rows.clear()
            self.meta["write_error"] = reason
            self.meta["dropped_events"] = self.dropped
            self._try_write_meta_locked()  # may not fit: the reader then sees an unfinished rank
        log.warning(
            "syncpace: rank %s: writing the trace to %s failed (%s); tracing stops for this "
            "rank, the job goes on",
            self.meta.get("rank"),
            self.dir,
            reason,
        )

    def flush(self) -> None:
        hook = self.before_flush
        if hook is not None:
            try:
                hook(self._closed)
            except Exception as exc:  # the rows it holds stay with it; the flush goes on
                log.warning("syncpace: completing rows before a flush failed: %s", exc)
        with self._lock:
            if self._events is None or self.write_error is not None:
                return
            offset = self._offset_ns()
            journal = self.journal
            written: list[pa.Table | pa.RecordBatch] = []
            if journal is not None:
                records, hi = journal.take()
                if len(records):
                    kinds = records["kind"]
                    written.append(
                        self._events.write_table(
                            jr.events_table(
                                records[kinds == jr.EVENT], self.rank, journal.strings, offset
                            ),
                            hi,
                        )
                    )
                    self._steps.write_table(
                        jr.steps_table(records[kinds == jr.STEP], self.rank, offset), hi
                    )
                journal.advance(hi)
            batch = self._events.drain(offset)
            if batch is not None:
                written.append(batch)
            self._steps.drain(offset)
            if self._summaries is not None:
                for part in written:
                    self._summaries.add(part)
                self._summaries.flush()
            rotated = isinstance(self._events, SegmentedEvents) and self._events.changed
            if rotated:
                self.meta["segments"] = self._events.account.to_json()
                self._events.changed = False
            overflow = journal.overflow if journal is not None else 0
            if rotated or (self.dropped, overflow) != (
                self.meta["dropped_events"],
                self.meta.get("journal_overflow", 0),
            ):
                self.meta["dropped_events"] = self.dropped
                if overflow:
                    self.meta["journal_overflow"] = overflow
                self._write_meta_locked()

    def pin(self, before_s: float, after_s: float, reason: str, step: int) -> None:
        """Keep full detail from ``before_s`` ago to ``after_s`` ahead (rotated traces)."""
        with self._lock:
            if isinstance(self._events, SegmentedEvents):
                self._events.pin(before_s, after_s, reason, step)

    def disk_bytes(self) -> int:
        """Bytes the events files take now (all kept segments)."""
        events = self._events
        if isinstance(events, SegmentedEvents):
            return events.disk_bytes()
        return events.size() if events is not None else 0

    # Metadata -----------------------------------------------------------------
    def update_meta(self, **fields: Any) -> None:
        """Update and rewrite the metadata; a failed write stops the writer, quietly."""
        with self._lock:
            self.meta.update(fields)
            error = self._try_write_meta_locked()
        if error is not None:
            self._stop_writing(error)

    def write_meta(self) -> None:
        with self._lock:
            self._write_meta_locked()

    def _try_write_meta_locked(self) -> OSError | None:
        try:
            self._write_meta_locked()
        except OSError as exc:
            return exc
        return None

    def _write_meta_locked(self) -> None:
        data = _encode_meta(self.meta) + b"\n"
        tmp = self.meta_path.with_suffix(".tmp")
        try:
            tmp.write_bytes(data + b" " * META_RESERVE)
            os.replace(tmp, self.meta_path)
        except OSError:
            tmp.unlink(missing_ok=True)
            if not self.meta_path.exists():
                raise
            self._write_meta_in_place(data)

    def _write_meta_in_place(self, data: bytes) -> None:
        """No room for a new file: overwrite the old one within its own blocks."""
        fd = os.open(self.meta_path, os.O_WRONLY)
        try:
            size = os.fstat(fd).st_size
            if len(data) > size:
                raise OSError(28, "No space left on device (metadata grew past its reserve)")
            os.pwrite(fd, data + b" " * (size - len(data)), 0)
        finally:
            os.close(fd)

    def close(self, **final_meta: Any) -> None:
        """Flush everything, end both streams and mark the metadata finished. Idempotent.

        Never raises for a failed write: it is recorded (``write_error``) and logged."""
        if self._events is None:
            return
        self._closed = True
        self._wake.set()
        try:
            self.flush()
        except Exception as exc:
            self._stop_writing(exc)
        failure: OSError | None = None
        with self._lock:
            if self._events is None:
                return
            self.meta.update(final_meta)
            if self.write_error is None:
                try:
                    self._events.close()
                    self._steps.close()
                    if self._summaries is not None:
                        self._summaries.close()
                        self.meta["summaries_written"] = self._summaries.written
                    if isinstance(self._events, SegmentedEvents):
                        self.meta["segments"] = self._events.account.to_json()
                    self.meta["finished"] = True
                    self.meta["events_written"] = self._events.written
                    self.meta["steps_written"] = self._steps.written
                    self.meta["dropped_events"] = self.dropped
                    self._write_meta_locked()
                except OSError as exc:
                    failure = exc
                else:
                    if self.journal is not None:
                        # the streams hold everything now: the journal is no longer needed
                        self.journal.close(remove=True)
            else:  # the streams stay unended: the reader sees where they stop
                self.meta["dropped_events"] = self.dropped
                self._try_write_meta_locked()
            if failure is None:
                self._events = None  # type: ignore[assignment]
                self._steps = None  # type: ignore[assignment]
        if failure is not None:
            self.meta["finished"] = False
            self._stop_writing(failure)
            with self._lock:
                self._events = None  # type: ignore[assignment]
                self._steps = None  # type: ignore[assignment]


def write_table(path: str | Path, table: pa.Table, max_rows: int = 1 << 16) -> None:
    """``table`` as one Arrow IPC stream of batches of at most ``max_rows``, each with its
    checksum, for producers that hold a whole table (converters, trace tools).

    A slice of a table (what ``to_batches`` and ``filter`` give) keeps its parent's
    buffers, so its checksum would not be that of the batch the reader decodes, which
    holds only the slice's bytes: each batch is checksummed as it comes back from its
    IPC encoding."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=max_rows) or [
            pa.RecordBatch.from_pylist([], schema=table.schema)
        ]:
            batch = pa.ipc.read_record_batch(batch.serialize(), table.schema)
            writer.write_batch(
                batch, custom_metadata={schema.CHECKSUM_KEY: schema.batch_checksum(batch)}
            )
