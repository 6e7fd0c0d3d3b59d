"""Completion timing of a backend's work, at the least cost the caller allows.

Every traced call returns a :class:`TimedWork` around the backend's work. It records
the event's exit the first time the completion is *observed*:

* ``wait()`` returned (how every blocking ``dist.*`` call and functional
  collective ends): exact, and nearly free;
* the future completed, when somebody asked for the future (DDP's reducer,
  ``async_op`` users chaining ``then``): a callback on the backend's thread, which
  costs a thread hand-off and is late by however long that thread waits for the GIL;
* ``is_completed()`` first answered true (polling users): an upper bound.

When the caller started to wait is kept too (``wait_ns``): a work waited on long after
it was issued may have finished before the wait began, so its exit is only an upper
bound there. A wait or a future that raises is recorded with the status the error
means (``failed``, ``timed_out``, ``aborted``) and the error itself, and re-raised
unchanged. A work dropped unobserved is recorded with ``exit_ns = -1`` so counts stay
exact.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

from torch._C._distributed_c10d import Work

from syncpace.capture.dynamo import keep_out

#: record(row, timing, status, error, wait_ns, token)
Record = Callable[[Any, str, str, "str | None", int, int], None]


class Sink(Protocol):
    """What a TimedWork reports to (the tracer)."""

    def now(self) -> int: ...
    def armed(self, delta: int) -> None: ...


def classify(exc: BaseException) -> tuple[str, str]:
    """The trace status an exception of a collective means, and its one-line text."""
    text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    lowered = str(exc).lower()
    if "timed out" in lowered or "timeout" in lowered or isinstance(exc, TimeoutError):
        return "timed_out", text[:500]
    if "abort" in lowered or "shut down" in lowered or "shutdown" in lowered:
        return "aborted", text[:500]
    return "failed", text[:500]


class TimedWork(Work):
    """``row`` is the event without its exit (or, with a recorder of coalesced calls,
    the list of them); ``token`` its in-flight token (see ``RankTraceWriter.begin``)."""

    def __init__(self, inner: Any, row: Any, token: int, record: Record, sink: Sink) -> None:
        super().__init__()
        self._inner = inner
        self._row: Any = row
        self._token = token
        self._record = record
        self._sink = sink
        self._now = sink.now

    def _observed(self, how: str, wait_ns: int = -1) -> None:
        row, self._row = self._row, None
        if row is not None:
            self._record(row, how, "completed", None, wait_ns, self._token)

    def _raised(self, exc: BaseException, wait_ns: int) -> None:
        row, self._row = self._row, None
        if row is not None:
            status, error = classify(exc)
            self._record(row, "wait", status, error, wait_ns, self._token)

    def wait(self, timeout: Any = None) -> bool:
        waited = self._now()
        try:
            result = self._inner.wait() if timeout is None else self._inner.wait(timeout)
        except BaseException as exc:
            self._raised(exc, waited)
            raise
        self._observed("wait", waited)
        return result

    def get_future(self) -> Any:
        future = self._inner.get_future()
        row, self._row = self._row, None
        if row is not None:
            # From here the future's callback alone records this event; until it has
            # run, closing the trace waits for it (bounded).
            self._sink.armed(1)
            future.add_done_callback(
                functools.partial(_future_done, row, self._token, self._record, self._sink)
            )
        return future

    def is_completed(self) -> bool:
        completed = self._inner.is_completed()
        if completed:
            self._observed("wait")
        return completed

    def is_success(self) -> bool:
        return self._inner.is_success()

    def exception(self) -> Any:
        return self._inner.exception()

    def source_rank(self) -> int:
        return self._inner.source_rank()

    def _source_rank(self) -> int:
        return self._inner._source_rank()

    def result(self) -> Any:
        return self._inner.result()

    def synchronize(self) -> None:
        self._inner.synchronize()

    def block_current_stream(self) -> None:
        self._inner.block_current_stream()

    def __del__(self) -> None:
        row, self._row = getattr(self, "_row", None), None
        if row is not None:
            self._record(row, "unobserved", "unobserved", None, -1, self._token)


def _future_done(row: Any, token: int, record: Record, sink: Sink, fut: Any) -> None:
    """A traced work's future completed (on the backend's thread)."""
    try:
        try:
            fut.value()
        except BaseException as exc:
            status, error = classify(exc)
            record(row, "future", status, error, -1, token)
            return
        record(row, "future", "completed", None, -1, token)
    finally:
        sink.armed(-1)


# Frames C++ enters while a compiled region runs: Dynamo must run them, not compile them.
keep_out(TimedWork, _future_done)
