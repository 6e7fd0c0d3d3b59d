"""Re-bucketing: communication issued after compute, split into buckets issued during it.

Ideal overlap (:func:`~.counterfactuals.ideal_overlap`) spreads the calls of a burst
over the compute before them; a burst of one call (every gradient in one bucket after
backward: DDP with a huge ``bucket_cap_mb``, one manual all-reduce after
``loss.backward()``) has nothing to spread, and saves nothing, while the same model
with its gradients in buckets reduced during backward runs much faster. This
counterfactual splits the burst's bytes into ``k`` buckets whose gradients become ready
at an even pace over the compute before the burst, each transferred in the run's own
time for its bytes, one after another on the link:

* a bucket of ``B / k`` bytes takes ``s = α + (T - m α) / k``, where ``T`` is the
  burst's measured link time (each call's service over the collectives it shared the
  link with), ``m`` its calls and ``α`` the fixed cost of one transfer (the link
  benchmark's, else a fit over the run's own sizes, else 0 and buckets no smaller
  than the latency knee, where a transfer's time is mostly its bytes);
* bucket ``i`` is ready at ``W i / k`` (``W``: the compute before the burst, of the
  member that posted last), starts when it is ready and the link is free, and the
  step waits for the last: the tail after the compute is
  ``X = max(s, W / k + k s - W)`` (the link keeps up, or it does not);
* in the program the burst's first call takes ``X`` and the others nothing (their
  bytes are in the buckets; the little compute between the calls stays): only where
  ``X`` is shorter than ``T``, so the change only ever removes time.

The trace has no compute markers: ``W`` is the whole compute before the burst, forward
included, so where forward is a large part of it the saving is an upper bound.
Only steps whose communication starts after their compute are re-bucketed: a rank and
step that posted a transfer at or above the knee outside the burst (buckets reduced
during backward) already overlaps, and is left as measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from syncpace.analysis.replay.counterfactuals import bursts
from syncpace.analysis.replay.engine import Change, run
from syncpace.analysis.replay.program import POST, Program

MIB = 1 << 20
#: DDP's default ``bucket_cap_mb``: the bucket count it gives is always a candidate.
DDP_DEFAULT_CAP_MB = 25
#: Bucket counts tried besides DDP's default cap.
COUNTS = (2, 4, 8, 16)
#: A burst is issued after compute when the compute between its calls is at most this
#: share of the compute before it.
_INSIDE = 0.1
#: A count saving within this share of the best saving's iteration loses to fewer
#: buckets (fewer, larger calls at no cost).
_TIE = 0.005


@dataclass(frozen=True)
class Rebucketing:
    """The bucket count chosen for a run, and what it rests on."""

    buckets: int
    burst_bytes: float  # median bytes of a burst
    fixed_ns: float
    fixed_from: str

    @property
    def cap_mb(self) -> float:
        """The ``bucket_cap_mb`` giving that many buckets (MiB, as DDP reads it)."""
        return self.burst_bytes / self.buckets / MIB

    def to_json(self) -> dict[str, Any]:
        return {
            "buckets": self.buckets,
            "bucket_cap_mb": round(self.cap_mb, 3),
            "burst_mb": round(self.burst_bytes / MIB, 3),
            "fixed_ms": round(self.fixed_ns / 1e6, 4),
            "fixed_from": self.fixed_from,
        }


@dataclass(frozen=True)
class _Burst:
    first: np.ndarray  # per burst: its first POST (action)
    actions: list[np.ndarray]  # per burst: its POSTs
    bytes: np.ndarray  # per burst
    link_ns: np.ndarray  # per burst: its calls' time alone on the link, summed
    calls: np.ndarray  # per burst


def _after_compute(prog: Program, knee_bytes: float) -> list[np.ndarray]:
    """The bursts that hold every transfer of ``knee_bytes`` or more their rank posted
    in that step, one at least, with little compute between their calls (at most
    :data:`_INSIDE` of the compute before them): the step's communication starts after
    its compute. Calls spread finely over backward (each gap small, their sum not) are
    overlapped already, as is a step with a large transfer outside the burst (buckets
    reduced during backward); a burst of small calls alone is latency's to coalesce."""
    nbytes = prog.instances["bytes"].to_numpy().astype(np.float64)
    safe = np.where(prog.inst >= 0, prog.inst, 0)
    large = (prog.kind == POST) & (prog.inst >= 0) & (nbytes[safe] >= knee_bytes)
    key = prog.rank.astype(np.int64) * (int(prog.step.max()) + 1) + prog.step
    counts = pl.DataFrame({"key": key[large]}).group_by("key").len()
    per_step = dict(counts.iter_rows())
    out = []
    for b in bursts(prog):
        n = int(large[b].sum())
        inside = float(prog.gap[b[1:]].sum())
        if n > 0 and n == per_step.get(int(key[b[0]]), 0) and inside <= _INSIDE * prog.gap[b[0]]:
            out.append(b)
    return out


def _measure(prog: Program, knee_bytes: float) -> _Burst:
    chosen = _after_compute(prog, knee_bytes)
    nbytes = prog.instances["bytes"].to_numpy().astype(np.float64)
    together = prog.instances["concurrent"].to_numpy().astype(np.float64)
    alone = prog.service / np.maximum(together, 1.0)
    size, link = np.zeros(len(chosen)), np.zeros(len(chosen))
    for i, b in enumerate(chosen):
        k = prog.inst[b]
        size[i] = nbytes[k].sum()
        link[i] = alone[k].sum()  # nan where a call never completed: left as measured
    return _Burst(
        first=np.array([b[0] for b in chosen], dtype=np.int64),
        actions=chosen,
        bytes=size,
        link_ns=link,
        calls=np.array([len(b) for b in chosen], dtype=np.float64),
    )


def tail_ns(
    window_ns: np.ndarray, link_ns: np.ndarray, calls: np.ndarray, k: int, fixed_ns: float
) -> np.ndarray:
    """The time after the compute until the last of ``k`` buckets has moved (see the
    module docstring): per bucket ``s = α + (T - m α) / k``, then
    ``max(s, W / k + k s - W)``."""
    per = fixed_ns + np.clip(link_ns - calls * fixed_ns, 0.0, None) / k
    return np.maximum(per, window_ns / k + k * per - window_ns)


def rebucketed(prog: Program, buckets: int, fixed_ns: float, knee_bytes: float) -> Change:
    """The bursts of steps whose communication starts after compute re-bucketed into
    ``buckets`` buckets issued during the compute before them (module docstring)."""
    return _change(prog, _measure(prog, knee_bytes), buckets, fixed_ns)


def _change(prog: Program, burst: _Burst, buckets: int, fixed_ns: float) -> Change:
    if len(burst.first) == 0:
        return Change()
    tail = tail_ns(prog.gap[burst.first], burst.link_ns, burst.calls, buckets, fixed_ns)
    inst = prog.inst[burst.first]
    # an instance starts when its last member posted: that member's compute is the
    # window its buckets had
    frame = pl.DataFrame(
        {"inst": inst, "t": prog.t[burst.first], "tail": tail, "b": np.arange(len(inst))}
    )
    last = frame.sort("t").group_by("inst").agg(pl.col("tail", "b").last())
    service = prog.service.copy()
    changed = np.zeros(len(service), dtype=bool)
    for k, x, b in last.iter_rows():
        if not x < burst.link_ns[b]:  # nan (a call never completed) or no gain
            continue
        service[k] = min(service[k], x)
        service[prog.inst[burst.actions[b][1:]]] = 0.0
        changed[k] = True
    return Change(service=service)


def best_rebucketing(
    prog: Program, fixed_ns: float, fixed_from: str, knee_bytes: float
) -> tuple[Rebucketing, Change] | None:
    """The bucket count that shortens the replayed iteration most, among DDP's default
    cap (25 MiB) and :data:`COUNTS`; fewer buckets where more save no more than
    :data:`_TIE` of the iteration. Without a fixed cost (``fixed_ns`` 0: time taken as
    proportional to bytes, which would favour ever smaller buckets) no bucket is
    smaller than ``knee_bytes``. None when no step's communication starts after its
    compute or no count saves anything."""
    burst = _measure(prog, knee_bytes)
    if len(burst.first) == 0:
        return None
    size = float(np.median(burst.bytes))
    counts = {*COUNTS, math.ceil(size / (DDP_DEFAULT_CAP_MB * MIB))}
    if fixed_ns <= 0:
        counts = {k for k in counts if size / k >= knee_bytes}
    counts = {k for k in counts if k >= 2}
    plain = run(prog).mean_ns
    tried = []
    for k in sorted(counts):
        change = _change(prog, burst, k, fixed_ns)
        tried.append((run(prog, change).mean_ns, k, change))
    if not tried:
        return None
    best = min(t[0] for t in tried)
    if best >= plain:
        return None
    _, k, change = next(t for t in tried if t[0] <= best + _TIE * plain)
    return Rebucketing(k, size, fixed_ns, fixed_from), change
