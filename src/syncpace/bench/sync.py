"""Bookkeeping between ranks over the job's store, off the traced data path.

The benchmark's own coordination (collecting timings on rank 0, round barriers,
the final verdict) goes through the TCPStore rather than collectives, so the trace
of a benchmark run holds only the calls being measured. Every wait is bounded.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from syncpace.errors import BenchError


def default_store() -> Any:
    """The store of the default process group (torch keeps it, privately)."""
    from torch.distributed import distributed_c10d as c10d

    try:
        return c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError) as exc:
        raise BenchError(f"cannot reach the process group's store: {exc}") from exc


class StoreSync:
    def __init__(
        self, store: Any, rank: int, world: int, timeout_s: float, prefix: str = "syncpace-bench"
    ) -> None:
        self.store = store
        self.rank = rank
        self.world = world
        self.timeout = timedelta(seconds=timeout_s)
        self.prefix = prefix

    def _key(self, *parts: object) -> str:
        return "/".join([self.prefix, *map(str, parts)])

    def _get(self, key: str) -> Any:
        try:
            self.store.wait([key], self.timeout)
            return json.loads(self.store.get(key))
        except RuntimeError as exc:  # the store's timeout or a lost peer
            raise BenchError(
                f"rank {self.rank}: no answer for {key!r} within "
                f"{self.timeout.total_seconds():.0f}s ({exc}); did another rank fail?"
            ) from exc

    def put(self, name: str, value: Any) -> None:
        self.store.set(self._key(name, self.rank), json.dumps(value))

    def gather(self, name: str) -> list[Any]:
        """Every rank's value of ``name`` (waits for each)."""
        return [self._get(self._key(name, r)) for r in range(self.world)]

    def all_gather(self, name: str, value: Any) -> list[Any]:
        self.put(name, value)
        return self.gather(name)

    def publish(self, name: str, value: Any) -> None:
        self.store.set(self._key(name, "all"), json.dumps(value))

    def read(self, name: str) -> Any:
        return self._get(self._key(name, "all"))

    def barrier(self, name: str) -> None:
        arrived = self.store.add(self._key(name, "arrived"), 1)
        if arrived == self.world:
            self.store.set(self._key(name, "done"), "1")
        self._get(self._key(name, "done"))
