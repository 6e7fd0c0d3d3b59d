"""Which test runs where with ``-n``: tests that share the CPU first, on every worker;
then the tests that measure time, one worker at a time, the others idle.

A test marked ``alone`` (``tests/conftest.py`` marks every multi-rank and root test so:
they time real ranks and links against each other) gives wrong figures when another
worker takes a core from its ranks. Run beside other tests on a 2-core machine, such
tests failed in every run of the suite on two workers; run alone, never. So:

* the test files without an ``alone`` test are spread over the workers first, a file
  to a worker (as ``--dist loadfile``);
* then the files with one run on one worker, the **alone worker**, while every other
  worker has finished its files and left.

Each worker writes the ids of its ``alone`` tests where the controller said
(:func:`write_alone`); the scheduler reads them once every worker has collected.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

#: The key of the workers' input naming the file for their ``alone`` test ids.
ALONE_FILE = "syncpace_alone_file"


def write_alone(path: str, nodeids: list[str]) -> None:
    """A worker's ``alone`` test ids, written whole or not at all."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(sorted(nodeids)))
    tmp.replace(path)


def read_alone(path: str) -> set[str]:
    try:
        return set(json.loads(Path(path).read_text()))
    except FileNotFoundError:  # no worker collected an alone test
        return set()


class AloneLastScheduling(LoadFileScheduling):
    """``--dist loadfile``, with the files holding an ``alone`` test kept to the end and
    run on one worker once every other worker has finished (and been shut down)."""

    def __init__(self, config, log=None, *, alone: Callable[[], set[str]]) -> None:
        super().__init__(config, log)
        self._alone_ids = alone
        self._alone_files: set[str] | None = None
        self.alone_node = None

    def _is_alone(self, scope: str) -> bool:
        if self._alone_files is None:
            self._alone_files = {i.split("::", 1)[0] for i in self._alone_ids()}
        return scope in self._alone_files

    def _shared_scope(self) -> str | None:
        return next((s for s in self.workqueue if not self._is_alone(s)), None)

    def _give(self, node, scope: str) -> None:
        self.workqueue.move_to_end(scope, last=False)  # loadfile assigns the first unit
        super()._assign_work_unit(node)

    def _assign_work_unit(self, node) -> None:
        scope = self._shared_scope()
        if scope is not None:
            self._give(node, scope)
            return
        # only alone files are left: the first worker to ask runs them, the others
        # finish what they hold and leave
        if self.alone_node is None:
            self.alone_node = node
        if node is not self.alone_node:
            if not node.shutting_down:
                node.shutdown()
            return
        self._start_alone()

    def _others_done(self) -> bool:
        return all(
            self._pending_of(work) == 0
            for node, work in self.assigned_work.items()
            if node is not self.alone_node
        )

    def _start_alone(self) -> None:
        node = self.alone_node
        if node is None or node.shutting_down or not self._others_done():
            return
        # two files' tests ahead at most, as loadfile keeps (a worker holds its last test
        # until it knows the next one)
        while self.workqueue and self._pending_of(self.assigned_work.get(node, {})) <= 2:
            self._give(node, next(iter(self.workqueue)))
        if not self.workqueue and not node.shutting_down:
            node.shutdown()

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        super().mark_test_complete(node, item_index, duration)
        self._start_alone()  # the last test of the other workers may open the alone phase

    def remove_node(self, node):
        if node is self.alone_node:  # it crashed: the next worker to ask takes over
            self.alone_node = None
        crashed = super().remove_node(node)
        self._start_alone()
        return crashed
