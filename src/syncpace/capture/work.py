"""Completion timing of a backend's work, at the least cost the caller allows.

Every traced call returns a :class:`TimedWork` around the backend's work. It records
the event's exit the first time the completion is *observed*:

* ``wait()`` returned (how every blocking ``dist.*`` call and functional
  collective ends): exact, and nearly free;
* the future completed, when somebody asked for the future (DDP's reducer,
  ``async_op`` users chaining ``then``): a callback on the backend's thread, which
  costs a thread hand-off and is late by however long that thread waits for the GIL;
* ``is_completed()`` first answered true (polling users): an upper bound.

A work dropped unobserved is recorded with ``exit_ns = -1`` so counts stay exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch._C._distributed_c10d import Work

Record = Callable[[tuple, str], None]


class TimedWork(Work):
    def __init__(self, inner: Any, row: tuple, record: Record) -> None:
        super().__init__()
        self._inner = inner
        self._row: tuple | None = row
        self._record = record

    def _observed(self, how: str) -> None:
        row, self._row = self._row, None
        if row is not None:
            self._record(row, how)

    def wait(self, timeout: Any = None) -> bool:
        result = self._inner.wait() if timeout is None else self._inner.wait(timeout)
        self._observed("wait")
        return result

    def get_future(self) -> Any:
        future = self._inner.get_future()
        row, self._row = self._row, None
        if row is not None:
            # From here the future's callback alone records this event.
            record = self._record
            future.add_done_callback(lambda _f: record(row, "future"))
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
            self._record(row, "unobserved")
