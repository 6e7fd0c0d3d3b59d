"""Run a program again, as measured or changed: a max-plus replay in causal order.

Each batch advances the member ranks of one collective instance (in the order the
instances started in the trace) through their actions up to their POST of it, then
resolves the instance: it starts when its last member posted and a slot of its stream
is free (the ``concurrency``-th latest end of the stream's earlier instances), and ends
its service time later. Within a batch every rank's chain of actions is one vectorised
max-plus recurrence, ``return = max(previous return + gap, dependency)``, solved with a
cumulative sum and a cumulative max over a padded (rank x action) block.

A WAIT or JOIN whose instance is not resolved yet (the trace's order does not show the
dependency: equal timestamps, clocks) does not wait; :attr:`Replayed.unresolved` counts
them. With a ``pacer`` the replay runs the pacer live: at the end of every step it is
shown every rank's arrival at the step's first collective and the step time, and the
delays it decides go before the first collective of the step it names (its own lag,
and nothing while its A/B guard holds pacing off), as the live controller does.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from syncpace.analysis.replay.program import END, JOIN, POST, WAIT, Program


class Pacer(Protocol):
    """What the replay needs of a pacer (``control.Pacer``: the policy, its lag and its
    A/B guard). ``observe`` returns ``None`` or what it decided: ``apply_at`` (the step
    the delays are for) and ``delays_s`` (per rank)."""

    def observe(self, step: int, arrivals_s: Any, step_time_s: float) -> Any: ...


#: world size -> a fresh pacer
PacerFactory = Callable[[int], Pacer]


@dataclass(frozen=True)
class Change:
    """What a counterfactual changes; ``None`` keeps the measured values."""

    gap: np.ndarray | None = None  # per action
    delta: np.ndarray | None = None  # per action (WAIT/JOIN)
    wait_on: np.ndarray | None = None  # per action
    service: np.ndarray | None = None  # per instance
    pacer: PacerFactory | None = None


@dataclass(frozen=True)
class Replayed:
    """Iteration times of the replayed steps, and where the replay had to guess."""

    steps: np.ndarray
    iteration_ns: np.ndarray
    unresolved: int = 0
    pacing: dict[str, float] = field(default_factory=dict)

    @property
    def mean_ns(self) -> float:
        known = self.iteration_ns[~np.isnan(self.iteration_ns)]
        return float(known.mean()) if len(known) else 0.0


def run(prog: Program, change: Change | None = None) -> Replayed:
    change = change or Change()
    gap = prog.gap if change.gap is None else change.gap
    delta = prog.delta if change.delta is None else change.delta
    wait_on = prog.wait_on if change.wait_on is None else change.wait_on
    service = prog.service if change.service is None else change.service
    if change.pacer is not None:
        gap = gap.copy()  # delays are added as the replay decides them
    depends = wait_on & ((prog.kind == WAIT) | (prog.kind == JOIN))
    safe_inst = np.where(prog.inst >= 0, prog.inst, 0)
    ends = np.full(len(prog.service), np.nan)
    starts = np.full(len(prog.service), np.nan)
    ret_all = np.zeros(prog.n_actions)
    ret_rank = prog.start.copy()
    streams: dict[int, list[float]] = {}
    pacing = _Pacing(prog, change, gap) if change.pacer is not None else None
    unresolved = 0
    for b in range(prog.n_batches + 1):
        lo, hi = int(prog.batch_ptr[b]), int(prog.batch_ptr[b + 1])
        if hi > lo:
            if pacing is not None:
                pacing.apply(lo, hi)
            # a rank sees its instance end at its own offset, never before it started
            own = np.maximum(ends[safe_inst[lo:hi]] + delta[lo:hi], starts[safe_inst[lo:hi]])
            dep = np.where(depends[lo:hi], own, -np.inf)
            missing = np.isnan(dep)
            if missing.any():
                unresolved += int(missing.sum())
                dep[missing] = -np.inf
            ret_all[lo:hi] = _chains(prog, b, lo, hi, gap[lo:hi], dep, ret_rank)
            s0, s1 = int(prog.seg_ptr[b]), int(prog.seg_ptr[b + 1])
            ret_rank[prog.seg_rank[s0:s1]] = ret_all[prog.seg_last[s0:s1]]
            if pacing is not None:
                pacing.observe(lo, hi, ret_all)
        if b < prog.n_batches:
            k = int(prog.batch_inst[b])
            members = prog.member_action[prog.member_ptr[k] : prog.member_ptr[k + 1]]
            start = float(ret_all[members].max()) if len(members) else np.nan
            slots = streams.setdefault(int(prog.stream[k]), [])
            if len(slots) >= prog.concurrency[k]:
                start = max(start, slots[0])
            end = start + service[k]
            ends[k], starts[k] = end, start
            if not np.isnan(end):
                if len(slots) < prog.concurrency[k]:
                    heapq.heappush(slots, end)
                elif end > slots[0]:
                    heapq.heapreplace(slots, end)
    iteration = _iterations(prog, ret_all)
    return Replayed(
        prog.steps,
        iteration,
        unresolved,
        pacing.summary() if pacing is not None else {},
    )


def _chains(
    prog: Program,
    b: int,
    lo: int,
    hi: int,
    gap: np.ndarray,
    dep: np.ndarray,
    ret_rank: np.ndarray,
) -> np.ndarray:
    """Returns of the batch's actions: per rank segment, r_i = max(r_{i-1} + g_i, d_i)
    from the rank's current return r_0, i.e. G_i + max(r_0, max_{j<=i}(d_j - G_j))."""
    s0 = int(prog.seg_ptr[b])
    nseg, width = int(prog.seg_ptr[b + 1]) - s0, int(prog.seg_width[b])
    seg = prog.seg[lo:hi] - s0
    pos = prog.seg_pos[lo:hi]
    block = np.zeros((nseg, width))
    block[seg, pos] = gap
    np.cumsum(block, axis=1, out=block)
    summed = block[seg, pos]
    best = np.full((nseg, width), -np.inf)
    best[seg, pos] = dep - summed
    np.maximum.accumulate(best, axis=1, out=best)
    start = ret_rank[prog.seg_rank[s0 : s0 + nseg]]
    return summed + np.maximum(start[seg], best[seg, pos])


def _iterations(prog: Program, ret: np.ndarray) -> np.ndarray:
    """Per replayed step: boundary to boundary, as ``iterations.global_steps`` does."""
    is_end = prog.kind == END
    step_index = np.searchsorted(prog.steps, prog.step[is_end])
    boundary = np.full(len(prog.steps), -np.inf)
    np.maximum.at(boundary, step_index, ret[is_end])
    first_start = float(np.nanmin(prog.start[np.unique(prog.rank)]))
    boundary[~np.isfinite(boundary)] = np.nan  # a step no rank ended (damaged trace)
    previous = np.r_[first_start, boundary[:-1]]
    return boundary - previous


class _Pacing:
    """The pacer run inside the replay, as the live controller runs it."""

    def __init__(self, prog: Program, change: Change, gap: np.ndarray) -> None:
        self.prog = prog
        self.gap = gap
        ranks = np.unique(prog.rank)
        self.ranks = ranks
        self.index = {int(r): i for i, r in enumerate(ranks)}
        assert change.pacer is not None
        self.pacer = change.pacer(len(ranks))
        self.delays: dict[int, np.ndarray] = {}
        self.applied = np.zeros(prog.n_actions)
        n_steps = len(prog.steps)
        self.arrival = np.full((n_steps, len(ranks)), np.nan)
        self.end = np.full((n_steps, len(ranks)), np.nan)
        self.left = np.bincount(
            np.searchsorted(prog.steps, prog.step[prog.kind == END]), minlength=n_steps
        )
        self.next_step = 0
        self.paced_steps = 0
        self.delay_sum_ns = 0.0

    def apply(self, lo: int, hi: int) -> None:
        first = np.flatnonzero(self.prog.first_post[lo:hi]) + lo
        for a in first:
            step = int(self.prog.step[a])
            delays = self.delays.get(step)
            if delays is None:
                continue
            d = float(delays[self.index[int(self.prog.rank[a])]])
            if d > 0:
                self.gap[a] += d
                self.applied[a] = d
                self.delay_sum_ns += d

    def observe(self, lo: int, hi: int, ret: np.ndarray) -> None:
        prog = self.prog
        kinds = prog.kind[lo:hi]
        for a in np.flatnonzero((kinds == POST) & prog.first_post[lo:hi]) + lo:
            s = int(np.searchsorted(prog.steps, prog.step[a]))
            r = self.index[int(prog.rank[a])]
            self.arrival[s, r] = ret[a] - self.applied[a]
        for a in np.flatnonzero(kinds == END) + lo:
            s = int(np.searchsorted(prog.steps, prog.step[a]))
            self.end[s, self.index[int(prog.rank[a])]] = ret[a]
            self.left[s] -= 1
        while self.next_step < len(prog.steps) and self.left[self.next_step] <= 0:
            self._decide(self.next_step)
            self.next_step += 1

    def _decide(self, s: int) -> None:
        arrivals = self.arrival[s]
        if np.isnan(arrivals).any():
            return  # a rank issued no collective in that step: the controller skips it
        start = self.end[s - 1] if s > 0 else self.prog.start[self.ranks]
        durations = self.end[s] - start
        step_time = float(np.nanmax(durations)) / 1e9
        decided = self.pacer.observe(
            int(self.prog.steps[s]), (arrivals - arrivals.min()) / 1e9, step_time
        )
        if decided is None:
            return
        delays = np.asarray(decided.delays_s, dtype=np.float64) * 1e9
        if delays.max(initial=0.0) > 0:
            self.paced_steps += 1
        self.delays[int(decided.apply_at)] = delays

    def summary(self) -> dict[str, float]:
        return {
            "paced_steps": float(self.paced_steps),
            "delay_sum_ms": self.delay_sum_ns / 1e6,
        }
