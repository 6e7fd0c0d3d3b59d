"""A ring whose transfers slow down while traffic that is not the job's crosses its
links, built as a trace (``test_mechanisms.job``), with the bytes each side put on a
link by any time: the job's own and the foreign sender's, for counters written beside it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from tests.analysis.test_mechanisms import job

Bytes = Callable[[float], float]


def slowed_ring(
    root: Path,
    *,
    hosts: list[str],
    steps: int,
    compute_ms: float,
    after_ms: float,
    nbytes: int,
    per_host: float,
    bytes_ms: float,
    slower: float,
    foreign: tuple[float, float] | None,
    foreign_per_ms: float,
    alpha_ms: float = 0.0,
) -> tuple[Bytes, Bytes, float]:
    """Each step computes ``compute_ms``, then one all-reduce of ``alpha_ms`` latency and
    ``bytes_ms`` of bytes, ``slower`` times longer where the middle of its bytes falls
    while the foreign sender sends (``foreign``: from, to in ms; ``None``: never).
    Returns a host's own bytes by a time (each transfer's ``per_host`` spread evenly
    over it), the foreign sender's bytes by a time (``foreign_per_ms`` while it sends),
    and the run's end in ms."""
    sending = foreign or (-1.0, -1.0)
    spans, t = [], 0.0
    for _ in range(steps):
        begin = t + compute_ms
        slow = sending[0] <= begin + alpha_ms + slower * bytes_ms / 2 < sending[1]
        spans.append((begin, begin + alpha_ms + bytes_ms * (slower if slow else 1.0)))
        t = spans[-1][1] + after_ms  # the job helper starts each step at the last's end
    job(
        root,
        hosts=hosts,
        steps=steps,
        compute=lambda r, s: compute_ms,
        transfer=lambda s: spans[s][1] - spans[s][0],
        nbytes=nbytes,
        after=after_ms,
    )

    def own(t_ms: float) -> float:
        return sum(per_host * np.clip((t_ms - a) / (b - a), 0, 1) for a, b in spans)

    def other(t_ms: float) -> float:
        inside = max(0.0, min(t_ms, sending[1]) - sending[0]) if foreign else 0.0
        return foreign_per_ms * inside

    return own, other, t
