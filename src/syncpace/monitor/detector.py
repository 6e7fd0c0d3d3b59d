"""The live detector: which rank holds the job back now, and since when.

Fed one :class:`Window` of gathered per-step summaries at a time (every rank's arrival
at the step's sync point and its step time), it keeps state across windows and emits a
:class:`Detection` when something starts or stops:

* **straggler** — per rank, a one-sided CUSUM over steps of the indicator "this rank
  arrived last, and the others waited for it alone at least ``min_gap`` of the step".
  Without a straggler a rank is last in about 1/N of the steps, so the statistic drifts
  down; a rank that is last step after step climbs by ``1 - k`` a step and starts an
  alarm after about ``h / (1 - k)`` steps (``k`` halfway between 1/N and 1). A second
  CUSUM of the opposite sign ends it. A change-point rather than a fixed share: a rank
  that is last in 60 % of steps is found as surely as one last in every step, only
  later, and random alternation between equal ranks never accumulates.
* **step_time_jump** — the window's median step time against a baseline taken from
  the windows before any jump; two windows above ``1 + jump`` times it start the
  event, two back below end it.

Transient lateness (one slow step) moves the CUSUM by less than one step's worth and
never alarms; it is still visible in the per-window scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Window:
    """Gathered summaries of consecutive steps: arrays of shape (world, steps)."""

    first_step: int
    arrivals_s: np.ndarray  # each rank's arrival at the step's first collective (NaN: none)
    step_s: np.ndarray  # each rank's step time

    @property
    def steps(self) -> int:
        return int(self.arrivals_s.shape[1])


@dataclass(frozen=True)
class Detection:
    """Something started or stopped at ``step``."""

    kind: str  # "straggler" or "step_time_jump"
    state: str  # "start" or "stop"
    step: int
    rank: int | None = None
    share: float = 0.0  # straggler: fraction of recent steps it arrived last
    cost: float = 0.0  # fraction of the step time the others waited for it (or the jump)
    steps_seen: int = 0  # the recent steps the share and cost are over
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "state": self.state,
            "step": self.step,
            "rank": self.rank,
            "share": round(self.share, 4),
            "cost": round(self.cost, 4),
            "steps_seen": self.steps_seen,
            **self.detail,
        }


@dataclass(frozen=True)
class RankScore:
    """Per rank over the detector's recent history."""

    last_share: float
    cost: float
    lateness_s: float  # mean arrival after the first rank
    wait_fraction: float  # mean wait for the last rank, as a fraction of the step


class OnlineDetector:
    """Deterministic: the same windows give the same detections on every rank."""

    def __init__(
        self,
        world_size: int,
        *,
        sensitivity: float = 4.0,
        min_gap: float = 0.02,
        jump: float = 0.25,
        history: int = 500,
    ) -> None:
        self.world = world_size
        self.h = sensitivity
        self.min_gap = min_gap
        self.jump = jump
        self.k = (1.0 / max(world_size, 1) + 1.0) / 2.0
        self.up = np.zeros(world_size)  # evidence that a rank became the straggler
        self.down = np.zeros(world_size)  # evidence that an active straggler recovered
        self.active: set[int] = set()
        self.since: dict[int, int] = {}  # active straggler -> the step its lateness began
        self._calm = np.full(world_size, -1, dtype=np.int64)  # last step ``up`` was zero
        self.history = history
        # Ring buffers over the last ``history`` steps (slot = step count % history).
        self._last = np.full(history, -1, dtype=np.int64)  # last rank (-1: none)
        self._gap = np.zeros(history)  # its gap as a fraction of the step
        self._late = np.full((world_size, history), np.nan)  # arrival after the first
        self._wait = np.full((world_size, history), np.nan)  # wait for the last / step
        self._medians: list[float] = []
        self.baseline_s: float | None = None
        self.jumping = False
        self._jump_streak = 0
        self.steps_seen = 0

    # Feeding ------------------------------------------------------------------------
    def observe(self, window: Window) -> list[Detection]:
        arrivals = np.asarray(window.arrivals_s, dtype=float)
        step_s = np.asarray(window.step_s, dtype=float)
        if arrivals.shape[0] != self.world or arrivals.shape != step_s.shape:
            raise ValueError(f"expected ({self.world}, steps) arrays, got {arrivals.shape}")
        out: list[Detection] = []
        for j in range(window.steps):
            out.extend(self._step(window.first_step + j, arrivals[:, j], step_s[:, j]))
        out.extend(self._jump(window.first_step + window.steps - 1, step_s))
        return out

    def _step(self, step: int, arrivals: np.ndarray, step_s: np.ndarray) -> list[Detection]:
        self.steps_seen += 1
        valid = np.isfinite(arrivals)
        duration = float(step_s[np.isfinite(step_s)].max()) if np.isfinite(step_s).any() else 0.0
        last, gap = -1, 0.0
        late = np.where(valid, arrivals - arrivals[valid].min(), np.nan) if valid.any() else None
        if valid.sum() >= 2 and duration > 0:
            order = np.argsort(np.where(valid, arrivals, -np.inf))
            last = int(order[-1])
            gap = float(arrivals[order[-1]] - arrivals[order[-2]]) / duration
        self._remember(last, gap, late, duration)
        hit = np.zeros(self.world)
        if last >= 0 and gap >= self.min_gap:
            hit[last] = 1.0
        self.up = np.maximum(0.0, self.up + hit - self.k)
        self.down = np.maximum(0.0, self.down + self.k - hit)
        self._calm[self.up == 0.0] = step
        events = []
        for rank in np.flatnonzero(self.up >= self.h).tolist():
            if rank not in self.active:
                self.active.add(rank)
                # The change point: the step after the statistic last stood at zero.
                self.since[rank] = int(self._calm[rank]) + 1
                self.down[rank] = 0.0
                events.append(self._event("start", step, rank))
        for rank in sorted(self.active):
            if self.down[rank] >= self.h:
                self.active.discard(rank)
                self.up[rank] = 0.0
                events.append(self._event("stop", step, rank))
                self.since.pop(rank, None)
        self.down[[r for r in range(self.world) if r not in self.active]] = 0.0
        return events

    def _remember(self, last: int, gap: float, late: np.ndarray | None, duration: float) -> None:
        slot = (self.steps_seen - 1) % self.history
        self._last[slot] = last
        self._gap[slot] = gap
        if late is None or duration <= 0:
            self._late[:, slot] = np.nan
            self._wait[:, slot] = np.nan
            return
        self._late[:, slot] = late
        self._wait[:, slot] = (late[np.isfinite(late)].max() - late) / duration

    def _event(self, state: str, step: int, rank: int) -> Detection:
        """Scored over the straggling span: from its change point to this step."""
        since = self.since.get(rank, step)
        span = max(1, step - since + 1)
        score = self.score(rank, recent=span)
        return Detection(
            "straggler",
            state,
            step,
            rank,
            share=score.last_share,
            cost=score.cost,
            steps_seen=min(span, self.history),
            detail={"since_step": since},
        )

    def _jump(self, step: int, step_s: np.ndarray) -> list[Detection]:
        per_step = np.where(np.isfinite(step_s), step_s, -np.inf).max(axis=0)
        per_step = per_step[np.isfinite(per_step)]  # the job's step time: its slowest rank
        if per_step.size == 0:
            return []
        median = float(np.median(per_step))
        if self.baseline_s is None:
            self._medians.append(median)
            if len(self._medians) >= 2:
                self.baseline_s = float(np.median(self._medians))
            return []
        above = median > self.baseline_s * (1 + self.jump)
        changed = above != self.jumping
        self._jump_streak = self._jump_streak + 1 if changed else 0
        if self._jump_streak < 2:
            if not self.jumping and not above:  # the baseline follows slow drift
                self.baseline_s = 0.9 * self.baseline_s + 0.1 * median
            return []
        self._jump_streak = 0
        self.jumping = above
        return [
            Detection(
                "step_time_jump",
                "start" if above else "stop",
                step,
                cost=median / self.baseline_s - 1,
                detail={"median_s": round(median, 6), "baseline_s": round(self.baseline_s, 6)},
            )
        ]

    # Reading ------------------------------------------------------------------------
    def score(self, rank: int, recent: int | None = None) -> RankScore:
        """How ``rank`` did over the last ``recent`` steps (default: all remembered)."""
        held = min(self.steps_seen, self.history)
        n = held if recent is None else min(recent, held)
        if n == 0:
            return RankScore(0.0, 0.0, 0.0, 0.0)
        slots = (self.steps_seen - 1 - np.arange(n)) % self.history
        mine = self._last[slots] == rank
        late, wait = self._late[rank, slots], self._wait[rank, slots]
        return RankScore(
            last_share=float(mine.mean()),
            cost=float(self._gap[slots][mine].sum() / n),
            lateness_s=float(np.nanmean(late)) if np.isfinite(late).any() else 0.0,
            wait_fraction=float(np.nanmean(wait)) if np.isfinite(wait).any() else 0.0,
        )
