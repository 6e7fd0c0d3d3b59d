"""Completion timing for backend works that offer no future (gloo send/recv).

The wrapper records the exit when the work is first seen complete: when ``wait()``
returns or ``is_completed()`` first answers true. That is an upper bound on the
completion time, exact for the blocking ``send``/``recv`` that wait at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch._C._distributed_c10d import Work


class _WaitTimedWork(Work):
    def __init__(self, inner: Any, on_done: Callable[[], None]) -> None:
        super().__init__()
        self._inner = inner
        self._on_done: Callable[[], None] | None = on_done

    def _done(self) -> None:
        on_done, self._on_done = self._on_done, None
        if on_done is not None:
            on_done()

    def wait(self, timeout: Any = None) -> bool:
        result = self._inner.wait() if timeout is None else self._inner.wait(timeout)
        self._done()
        return result

    def is_completed(self) -> bool:
        completed = self._inner.is_completed()
        if completed:
            self._done()
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

    def get_future(self) -> Any:
        return self._inner.get_future()


def wait_timed_work(work: Any, on_done: Callable[[], None]) -> Any:
    return _WaitTimedWork(work, on_done)
