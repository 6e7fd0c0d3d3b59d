"""Which test runs where with ``-n``: the tests that measure time on one worker at the
machine's normal CPU priority, from the start; every other test on workers that take
only the CPU time no other process wants.

A test marked ``timed`` (``tests/conftest.py`` marks every multi-rank and root test so:
they time real ranks and links against each other) gives wrong figures when another
test takes a core from its ranks. Run beside other tests of equal priority on a 2-core
machine, such tests failed 1-4 a run; yet they leave a core idle most of the time
(their ranks wait on emulated links and sleeps). So:

* the **timed worker** (the first worker up, or the next one up once it is gone: a
  :class:`TimedSeat`) runs the files holding a ``timed`` test first, one at a time,
  then helps with the others;
* every other worker runs at ``SCHED_IDLE`` (:func:`yield_the_cpu`, from the worker's
  own ``pytest_configure``): the kernel gives it a core only where no process of
  normal priority wants one, so a timed test's ranks never wait for a core behind it;
* a file is a unit, as with ``--dist loadfile``.

Each worker writes the ids of its ``timed`` tests where the controller said
(:func:`write_timed`); the scheduler reads them once every worker has collected. Timed
files left when the timed worker is lost, with no worker to take its seat, run last on
one worker with nothing beside them.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadFileScheduling

#: The key of the workers' input naming the file for their ``timed`` test ids.
TIMED_FILE = "syncpace_timed_file"
#: The key of the workers' input saying whether the worker holds the timed seat.
TIMED_WORKER = "syncpace_timed_worker"


def write_timed(path: str, nodeids: list[str]) -> None:
    """A worker's ``timed`` test ids, written whole or not at all. Every worker writes
    the same ids at about the same time: each through a file of its own, renamed into
    place (one shared temporary name let a worker rename the other's away)."""
    fd, tmp = tempfile.mkstemp(dir=Path(path).parent, prefix=".timed-")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(sorted(nodeids)))
    os.replace(tmp, path)


def read_timed(path: str) -> set[str]:
    try:
        return set(json.loads(Path(path).read_text()))
    except FileNotFoundError:  # no worker collected a timed test
        return set()


def yield_the_cpu() -> str:
    """Put this process (and what it starts later) below every normal process: Linux's
    ``SCHED_IDLE``, or ``nice 19`` where that is refused. Returns what it got."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "SCHED_IDLE"
    except (AttributeError, OSError):
        pass
    try:
        os.nice(19 - os.nice(0))
        return "nice 19"
    except OSError:
        return "unchanged"


@dataclass
class TimedSeat:
    """The one worker that runs the timed tests, shared by the controller's hooks (which
    tell each worker whether it holds the seat) and the scheduler (which frees it when
    that worker is gone)."""

    holder: Any = None

    def take(self, node: Any) -> bool:
        if self.holder is None:
            self.holder = node
        return self.holder is node

    def leave(self, node: Any) -> None:
        if self.holder is node:
            self.holder = None


class TimedFirstScheduling(LoadFileScheduling):
    """``--dist loadfile``, with the files holding a ``timed`` test given to the seat's
    holder first and to no other worker while anything else runs."""

    def __init__(self, config, log=None, *, timed: Callable[[], set[str]], seat: TimedSeat) -> None:
        super().__init__(config, log)
        self._timed_ids = timed
        self._timed_files: set[str] | None = None
        self.seat = seat

    def _is_timed(self, scope: str) -> bool:
        if self._timed_files is None:
            self._timed_files = {i.split("::", 1)[0] for i in self._timed_ids()}
        return scope in self._timed_files

    def _first(self, timed: bool) -> str | None:
        return next((s for s in self.workqueue if self._is_timed(s) == timed), None)

    def _idle_elsewhere(self, node) -> bool:
        return all(self._pending_of(w) == 0 for n, w in self.assigned_work.items() if n is not node)

    def _scope_for(self, node) -> str | None:
        if node is self.seat.holder:
            return self._first(True) or self._first(False)
        scope = self._first(False)
        if scope is None and self.seat.holder is None and self._idle_elsewhere(node):
            return self._first(True)  # the seat is empty: they run with nothing beside
        return scope

    def _assign_work_unit(self, node) -> None:
        scope = self._scope_for(node)
        if scope is not None:
            if self._is_timed(scope):
                self.seat.take(node)
            self.workqueue.move_to_end(scope, last=False)  # loadfile assigns the first unit
            super()._assign_work_unit(node)
        # nothing more it may take: it runs what it holds (a worker holds its last test
        # until it knows the next one or is shut down) and leaves
        if self._scope_for(node) is None and not node.shutting_down:
            node.shutdown()

    def remove_node(self, node):
        self.seat.leave(node)
        crashed = super().remove_node(node)
        for other in self.nodes:  # an empty seat may open the timed files to another
            self._reschedule(other)
        return crashed
