"""The side channel the controller shares per-step numbers over.

A private gloo group built directly on the job's store (its own key prefix, its own
connections), never registered with torch.distributed: the job's collectives, their
number and order, are untouched. Each step every rank contributes a few floats with
an asynchronous all-gather; they are collected ``lag`` steps later, when every rank
has long submitted them, so collecting never waits in a healthy job. Every wait is
bounded; any failure raises :class:`ChannelError` and the controller fails open.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import numpy as np

from syncpace.errors import ChannelError


def _break_at(rank: int) -> int | None:
    """Test hook ``SYNCPACE_PACE_BREAK=RANK:STEP``: this rank's channel fails at STEP."""
    spec = os.environ.get("SYNCPACE_PACE_BREAK", "")
    if ":" not in spec:
        return None
    who, _, step = spec.partition(":")
    return int(step) if who.isdigit() and int(who) == rank and step.isdigit() else None


class GatherChannel:
    def __init__(
        self,
        store: Any,
        rank: int,
        world_size: int,
        width: int,
        timeout_s: float,
        name: str = "pace",
    ):
        import torch.distributed as dist

        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self._pg = dist.ProcessGroupGloo(
            dist.PrefixStore(f"syncpace/{name}/{attempt}/", store),
            rank,
            world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        self._world = world_size
        self._width = width
        self._timeout = timedelta(seconds=timeout_s)
        self._pending: dict[int, tuple[Any, list[Any]]] = {}
        self._break_at = _break_at(rank)

    def submit(self, step: int, values: list[float]) -> None:
        import torch

        if self._break_at is not None and step >= self._break_at:
            raise ChannelError(f"channel broken at step {step} (SYNCPACE_PACE_BREAK)")
        inp = torch.tensor(values, dtype=torch.float64)
        outs = [torch.empty(self._width, dtype=torch.float64) for _ in range(self._world)]
        try:
            work = self._pg.allgather([outs], [inp])
        except Exception as exc:
            raise ChannelError(f"gather for step {step} failed: {exc}") from exc
        self._pending[step] = (work, outs)

    def collect(self, step: int) -> np.ndarray:
        """Every rank's values of ``step``, shape (world, width); bounded wait."""
        if step not in self._pending:
            raise ChannelError(f"nothing gathered for step {step}")
        work, outs = self._pending.pop(step)
        try:
            work.wait(self._timeout)
        except Exception as exc:
            raise ChannelError(f"gather for step {step} did not complete: {exc}") from exc
        return np.stack([o.numpy() for o in outs])
