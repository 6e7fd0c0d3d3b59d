"""What a rank has in flight: entered calls not yet recorded, and the last call per group.

Kept on the hot path at the cost of three dictionary operations per call, and no lock:
a single ``dict`` store or ``pop`` is atomic under the GIL, and readers take
``dict.copy()`` (atomic too, the keys being ints). The protocol:

* :class:`~syncpace.capture.process_group.TracingProcessGroup` stores the event row
  (see :mod:`syncpace.capture.tracer`) under ``id(row)`` in :attr:`InFlight.calls`
  before it calls the backend, so a call that blocks inside the backend is in flight
  too;
* the tracer stores the backend's work under the same key in :attr:`InFlight.works`
  once the call returned one (the watchdog asks it whether it completed unobserved);
* when the call is recorded (completed, failed, dropped) the tracer pops both keys and
  keeps the recorded event row as the group's :attr:`InFlight.last`.

The row object stays referenced by the registry while in flight, so its ``id`` cannot
be reused before it is popped.
"""

from __future__ import annotations

from typing import Any

from syncpace.trace.columns import EV


class InFlight:
    __slots__ = ("calls", "works", "last")

    def __init__(self) -> None:
        self.calls: dict[int, tuple] = {}
        self.works: dict[int, Any] = {}
        self.last: dict[str, tuple] = {}

    def recorded(self, row: tuple, event: tuple) -> None:
        """``row`` left flight; ``event`` is the full row the trace received for it."""
        key = id(row)
        self.calls.pop(key, None)
        self.works.pop(key, None)
        self.last[row[EV.group]] = event

    def forget(self, row: tuple) -> None:
        """``row`` will never be recorded (tracing is off): drop it."""
        key = id(row)
        self.calls.pop(key, None)
        self.works.pop(key, None)

    def snapshot(self) -> tuple[dict[int, tuple], dict[int, Any], dict[str, tuple]]:
        """Copies of the three maps, safe to read from another thread."""
        return self.calls.copy(), self.works.copy(), self.last.copy()
