"""The whole run of an always-on job, from what stays of every step: per-step times and
blocked time as bands across ranks, the live detections as intervals, and which steps
still have full event detail.

The analysis proper (:mod:`syncpace.analysis.metrics`) covers the steps every rank
still holds in full; this covers all of them, from the step boundaries and per-step
summaries (:mod:`syncpace.trace.wholerun`) — measurement only, no judgement.

**Aggregation rule.** Steps are grouped in bins of ``bin_steps`` consecutive step ids,
the smallest power of two that leaves at most :data:`MAX_POINTS` bins (one step a bin
up to 800 steps; 2,048 at a million). Per rank and bin: the mean step time (end minus
start of its boundary rows) and the mean time blocked in collectives per step. Per bin,
across ranks: the fastest, median and slowest rank's mean, and the slowest single step
of any rank. So the figure holds at most :data:`MAX_POINTS` points a line whatever the
run's length and world size, and memory is ranks x bins (24 bytes each: 77 MB at 4,096
ranks), not ranks x steps: each rank's files are read, folded into the bins and let go.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from syncpace.trace import wholerun
from syncpace.trace.reader import Trace, rotated_steps

#: Most bins (points of each line) the whole run is drawn with.
MAX_POINTS = 800


@dataclass(frozen=True)
class DetectionSpan:
    """One episode the live monitor reported: when it began, when it was seen, when it
    was over (``stop_step`` is ``None`` while it still held at the end of the run)."""

    kind: str  # "straggler" or "step_time_jump"
    rank: int | None
    start_step: int  # straggler: the change point the detector named; else its detection
    detected_step: int | None  # the step its start was detected at (None: start not seen)
    stop_step: int | None  # the step its end was detected at
    share: float  # straggler: share of the steps it arrived last (at its start)
    cost: float  # share of the step the others waited for it, or the jump
    stop_cost: float | None = None  # the cost over the whole episode, at its stop

    @property
    def episode_cost(self) -> float:
        """A straggler's cost over its whole episode (at its stop, when seen); a jump's
        size as it started (at its stop the step time is back to the baseline)."""
        if self.kind == "straggler" and self.stop_cost is not None:
            return self.stop_cost
        return self.cost

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "rank": self.rank,
            "start_step": self.start_step,
            "detected_step": self.detected_step,
            "stop_step": self.stop_step,
            "share": self.share,
            "cost": self.cost,
            "stop_cost": self.stop_cost,
        }


@dataclass(frozen=True, eq=False)
class WholeRun:
    """The whole run of an always-on job (see the module docstring for the rule).
    Equal when every number and every bin is (a frame has no truth value of its own)."""

    steps: int  # distinct steps seen (a boundary or a summary on some rank)
    first_step: int
    last_step: int
    summarised: int  # distinct steps with a summary on some rank
    ranks: int  # ranks with a summaries file
    #: Steps every rank still holds in full event detail, as [first, last] intervals.
    full_detail: tuple[tuple[int, int], ...]
    full_detail_steps: int
    bin_steps: int
    #: One row per bin: first_step, last_step, steps, step_ns_min/median/max (over
    #: ranks of the rank's mean), step_ns_worst, blocked_ns_median/max, calls, failed.
    bins: pl.DataFrame
    detections: tuple[DetectionSpan, ...]
    calls: int
    failed: int
    warnings: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WholeRun):
            return NotImplemented
        return (
            self.to_json() == other.to_json()
            and self.warnings == other.warnings
            and self.bins.equals(other.bins, null_equal=True)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable-looking: holds a frame

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "summarised": self.summarised,
            "ranks": self.ranks,
            "full_detail": [list(x) for x in self.full_detail],
            "full_detail_steps": self.full_detail_steps,
            "bin_steps": self.bin_steps,
            "points": self.bins.height,
            "calls": self.calls,
            "failed": self.failed,
            "detections": [d.to_json() for d in self.detections],
        }


class _Bins:
    """Per (rank, bin) sums; bins double in width (pairs merged, exactly) whenever the
    highest step seen would need more than ``MAX_POINTS`` of them."""

    def __init__(self, ranks: int, max_points: int) -> None:
        self.width, self.max_points, self.ranks = 1, max_points, ranks
        self.step_sum = np.zeros((ranks, 0))
        self.step_n = np.zeros((ranks, 0), dtype=np.int32)
        self.blocked_sum = np.zeros((ranks, 0))
        self.summ_n = np.zeros((ranks, 0), dtype=np.int32)
        self.worst = np.zeros(0, dtype=np.int64)
        self.calls = np.zeros(0, dtype=np.int64)
        self.failed = np.zeros(0, dtype=np.int64)

    @property
    def cols(self) -> int:
        return self.worst.size

    def fit(self, max_step: int) -> None:
        while max_step // self.width + 1 > self.max_points:
            self._double()
        need = max_step // self.width + 1
        if need > self.cols:
            self._pad(need - self.cols)

    def _pad(self, extra: int) -> None:
        for name in ("step_sum", "step_n", "blocked_sum", "summ_n"):
            setattr(self, name, np.pad(getattr(self, name), ((0, 0), (0, extra))))
        for name in ("worst", "calls", "failed"):
            setattr(self, name, np.pad(getattr(self, name), (0, extra)))

    def _double(self) -> None:
        if self.cols % 2:
            self._pad(1)  # an empty bin at the end: pairs merge evenly
        for name in ("step_sum", "step_n", "blocked_sum", "summ_n"):
            a = getattr(self, name)
            setattr(self, name, a.reshape(self.ranks, -1, 2).sum(axis=2, dtype=a.dtype))
        self.worst = self.worst.reshape(-1, 2).max(axis=1)
        self.calls = self.calls.reshape(-1, 2).sum(axis=1)
        self.failed = self.failed.reshape(-1, 2).sum(axis=1)
        self.width *= 2

    def add(self, i: int, s: wholerun.RankSeries) -> None:
        top = max(int(s.steps.max(initial=-1)), int(s.summary_steps.max(initial=-1)))
        if top < 0:
            return
        self.fit(top)
        n = self.cols
        b = s.steps // self.width
        self.step_sum[i] += np.bincount(b, weights=s.step_ns, minlength=n)
        self.step_n[i] += np.bincount(b, minlength=n).astype(np.int32)
        np.maximum.at(self.worst, b, s.step_ns)
        c = s.summary_steps // self.width
        self.blocked_sum[i] += np.bincount(c, weights=s.blocked_ns, minlength=n)
        self.summ_n[i] += np.bincount(c, minlength=n).astype(np.int32)
        self.calls += np.bincount(c, weights=s.calls, minlength=n).astype(np.int64)
        self.failed += np.bincount(c, weights=s.failed, minlength=n).astype(np.int64)


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.size == b.size and np.array_equal(a, b):  # ranks mostly hold the same steps
        return a
    return np.union1d(a, b)


def _across(sums: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per bin: the min, median and max over ranks of each rank's mean (NaN: no rank)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    held = (counts > 0).any(axis=0)
    out = [np.full(mean.shape[1], np.nan) for _ in range(3)]
    if held.any():
        m = mean[:, held]
        out[0][held] = np.nanmin(m, axis=0)
        out[1][held] = np.nanmedian(m, axis=0)
        out[2][held] = np.nanmax(m, axis=0)
    return tuple(out)


def intervals(steps: np.ndarray) -> list[tuple[int, int]]:
    """Sorted unique step ids as [first, last] runs of consecutive ids."""
    if steps.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(steps) != 1)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [steps.size - 1]))
    return [(int(steps[a]), int(steps[b])) for a, b in zip(starts, ends, strict=True)]


def spans(detections: Iterable[wholerun.Detection]) -> list[DetectionSpan]:
    """Starts paired with the stops that follow them, per (kind, rank)."""
    open_: dict[tuple[str, int | None], DetectionSpan] = {}
    done: list[DetectionSpan] = []
    for d in detections:
        key = (d.kind, d.rank)
        if d.state == "start":
            if key in open_:  # a second start without a stop: the first stays open-ended
                done.append(open_.pop(key))
            begin = d.since_step if d.since_step is not None else d.step
            open_[key] = DetectionSpan(d.kind, d.rank, begin, d.step, None, d.share, d.cost)
            continue
        began = open_.pop(key, None)
        if began is None:  # its start is not in the file (cut, or an older run's lines)
            begin = d.since_step if d.since_step is not None else d.step
            done.append(DetectionSpan(d.kind, d.rank, begin, None, d.step, d.share, 0.0, d.cost))
        else:
            done.append(
                DetectionSpan(
                    d.kind,
                    d.rank,
                    began.start_step,
                    began.detected_step,
                    d.step,
                    began.share,
                    began.cost,
                    d.cost,
                )
            )
    done.extend(open_.values())
    return sorted(done, key=lambda s: (s.start_step, s.kind, -1 if s.rank is None else s.rank))


def whole_run(trace: Trace, *, max_points: int = MAX_POINTS) -> WholeRun | None:
    """The whole run of ``trace``'s directory; ``None`` when no rank wrote summaries
    (not an always-on run). Problems of the summaries files are already among the
    reader's warnings; those of the detections files are in ``warnings``."""
    root, ranks = Path(trace.path), trace.ranks
    scratch: list[str] = []  # the reader said these (load_summaries, the same rules)
    bins = _Bins(len(ranks), max_points)
    every = np.zeros(0, dtype=np.int64)
    summarised = np.zeros(0, dtype=np.int64)
    found = 0
    for i, rank in enumerate(ranks):
        series = wholerun.rank_series(root, rank, scratch)
        if series is None:
            continue
        found += 1
        bins.add(i, series)
        every = _union(every, _union(series.steps, np.unique(series.summary_steps)))
        summarised = _union(summarised, np.unique(series.summary_steps))
    if not found:
        return None
    warnings: list[str] = []
    if trace.detections is not None:  # read with the trace
        detections = trace.detections.found
        warnings.extend(trace.detections.warnings)
    else:
        detections = tuple(
            wholerun.run_detections(root, ranks, trace.world_size, warnings, trace.meta)
        )
    rotated = rotated_steps(trace.meta)
    gone = np.zeros(every.size, dtype=bool)
    for a, b in rotated:
        gone |= (every >= a) & (every <= b)
    full = every[~gone]
    lo, mid, hi = _across(bins.step_sum, bins.step_n)
    b_lo, b_mid, b_hi = _across(bins.blocked_sum, bins.summ_n)
    del b_lo
    width = bins.width
    per_bin = np.bincount(every // width, minlength=bins.cols) if every.size else np.zeros(0)
    index = np.flatnonzero(per_bin[: bins.cols] > 0) if bins.cols else np.zeros(0, dtype=int)
    last = int(every[-1]) if every.size else 0
    frame = pl.DataFrame(
        {
            "first_step": index * width,
            "last_step": np.minimum(index * width + width - 1, last),
            "steps": per_bin[index],
            "step_ns_min": lo[index],
            "step_ns_median": mid[index],
            "step_ns_max": hi[index],
            "step_ns_worst": bins.worst[index],
            "blocked_ns_median": b_mid[index],
            "blocked_ns_max": b_hi[index],
            "calls": bins.calls[index],
            "failed": bins.failed[index],
        },
        schema={
            "first_step": pl.Int64,
            "last_step": pl.Int64,
            "steps": pl.Int64,
            "step_ns_min": pl.Float64,
            "step_ns_median": pl.Float64,
            "step_ns_max": pl.Float64,
            "step_ns_worst": pl.Int64,
            "blocked_ns_median": pl.Float64,
            "blocked_ns_max": pl.Float64,
            "calls": pl.Int64,
            "failed": pl.Int64,
        },
    ).fill_nan(None)
    return WholeRun(
        steps=int(every.size),
        first_step=int(every[0]) if every.size else 0,
        last_step=last,
        summarised=int(summarised.size),
        ranks=found,
        full_detail=tuple(intervals(full)),
        full_detail_steps=int(full.size),
        bin_steps=width,
        bins=frame,
        detections=tuple(spans(detections)),
        calls=int(bins.calls.sum()),
        failed=int(bins.failed.sum()),
        warnings=tuple(warnings),
    )
