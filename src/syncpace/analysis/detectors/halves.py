"""The run's halves: what a finding names must stand out over the run and in each half.

A rank late for a while and then another, a host whose ranks wait for a CPU in one
part of the run and another host in the next, ranks that end their transfers late here
and there: each is named by whatever happened to lead when the run was cut. A rerun
names another. So a straggler (``arrival.stable_late``), a starved host
(``cpu.placed``) and a slow link's host (``network``) are named only where the same
judgement finds them over the whole run and in each of its halves judged alone; runs
too short to halve (fewer than :data:`MIN_STEPS` steps) are judged whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import polars as pl

if TYPE_CHECKING:  # the context imports the detectors' modules: typed only
    from syncpace.analysis.detectors.context import Context

T = TypeVar("T")

#: Runs of fewer steps are judged whole: two steps a half say nothing of stability.
MIN_STEPS = 4


def steps(ctx: Context) -> np.ndarray:
    """The run's steps, in order (the replay's, else the measured ones)."""
    if ctx.program is not None:
        return np.unique(ctx.program.steps)
    return np.unique(ctx.metrics.rank_step["step"].to_numpy())


def in_half(ordered: Any, half: int | None) -> pl.Expr:
    """The rows of ``half`` (0: first, 1: second, None: all) of the steps ``ordered``."""
    if half is None:
        return pl.lit(True)
    ordered = np.unique(np.asarray(ordered))
    middle = len(ordered) // 2
    chosen = ordered[:middle] if half == 0 else ordered[middle:]
    return pl.col("step").is_in(chosen.tolist())


def window(ctx: Context, half: int | None) -> tuple[int, int] | None:
    """First start to last end (ns) of the measured iterations of ``half`` of the run
    (the whole run for None); None without iterations."""
    rs = ctx.metrics.rank_steps.filter(in_half(steps(ctx), half))
    if rs.height == 0:
        return None
    return int(rs["start_ns"].min()), int(rs["end_ns"].max())  # type: ignore[arg-type]


def halved(ctx: Context) -> bool:
    """Whether the run is long enough to judge its halves alone."""
    return len(steps(ctx)) >= MIN_STEPS


def in_each_half(ctx: Context, judge: Callable[[int | None], Iterable[T]]) -> list[T]:
    """What ``judge`` (called with None for the whole run, 0 and 1 for its halves)
    finds over the run and in each half alone; over the run only where it is too short
    to halve."""
    whole = set(judge(None))
    if not halved(ctx) or not whole:
        return sorted(whole)  # type: ignore[type-var]
    return sorted(whole & set(judge(0)) & set(judge(1)))  # type: ignore[type-var]


def ranks_where(ctx: Context, ranks: list[int]) -> str:
    """Ranks with their hosts, as the findings that name no place say where the late
    ranks were in each half: "ranks 1, 4 (h0, h2)", or "none"."""
    if not ranks:
        return "none"
    hosts = ", ".join(sorted({ctx.nodes_of([r])[0] for r in ranks}))
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} ({hosts})"
