"""Iterations of different kinds, told apart by the collectives they make.

An evaluation pass every few steps, a checkpoint step, or any step whose collectives
differ from the others' is not a training iteration: averaged in, its extra time reads
as jitter. Each step's *signature* is, per operation, how many calls of it the step
made and how many bytes they moved (on the lowest rank that has the step). Two
signatures are of one kind when, for every operation, their call counts differ by at
most one call or a quarter (a missing call, two calls coalesced into one) and their
bytes by at most a quarter (not compared for the operations whose sizes the data sets:
all-to-all, send, receive). The kind with the most steps is the training iterations;
the others are measured apart (:func:`describe`) and kept out of every figure.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from syncpace.analysis import iterations
from syncpace.analysis.collectives import Matched, call_steps, windowed

#: Per operation: (calls, bytes).
Signature = dict[str, tuple[int, int]]

#: The share of calls or bytes by which steps of one kind may differ per operation.
TOLERANCE = 0.25

#: Operations whose sizes the data sets (an MoE layer's routing, activations of
#: sequences of varying length): only their call counts tell kinds apart.
DATA_SIZED = frozenset({"all_to_all", "send", "recv"})


def similar(a: Signature, b: Signature, tolerance: float = TOLERANCE) -> bool:
    """Whether steps of signatures ``a`` and ``b`` are of one kind."""
    for op in a.keys() | b.keys():
        (na, ba), (nb, bb) = a.get(op, (0, 0)), b.get(op, (0, 0))
        if abs(na - nb) > max(1.0, tolerance * max(na, nb)):
            return False
        if op not in DATA_SIZED and abs(ba - bb) > tolerance * max(ba, bb):
            return False
    return True


def classify(signatures: dict[int, Signature]) -> list[list[int]]:
    """Steps grouped by kind, the kind with the most steps first (ties: the earliest
    step), a kind that made calls before the one that made none (steps without a call
    are idle time between iterations, never the training iterations). The most
    frequent exact signatures are the kinds' centres, so one odd step never becomes
    the centre the others are judged against."""
    frozen = {s: tuple(sorted(sig.items())) for s, sig in signatures.items()}
    counts = Counter(frozen.values())
    first = {}
    for step in sorted(frozen):
        first.setdefault(frozen[step], step)
    centres: list[tuple[tuple[Any, ...], list[int]]] = []
    of: dict[tuple[Any, ...], int] = {}
    for sig in sorted(counts, key=lambda k: (-counts[k], first[k])):
        home = next((i for i, (c, _) in enumerate(centres) if similar(dict(c), dict(sig))), None)
        if home is None:
            centres.append((sig, []))
            home = len(centres) - 1
        of[sig] = home
    for step in sorted(frozen):
        centres[of[frozen[step]]][1].append(step)
    return [
        steps
        for sig, steps in sorted(centres, key=lambda c: (not c[0], -len(c[1]), c[1][0]))
        if steps
    ]


def step_signatures(events: pl.DataFrame) -> dict[int, Signature]:
    """Each step's signature: per op, the most calls (and bytes) any rank made in it. A
    call a rank did not record (a sampled log, a dump interval longer than the step)
    is still counted where another rank has it, so missing records do not make a kind."""
    if events.height == 0:
        return {}
    ev = events.with_columns(_step=call_steps(events)).filter(pl.col("_step") >= 0)
    per_rank = ev.group_by("_step", "op", "rank").agg(n=pl.len(), b=pl.col("bytes").sum())
    per = per_rank.group_by("_step", "op").agg(n=pl.col("n").max(), b=pl.col("b").max())
    out: dict[int, Signature] = {}
    for row in per.iter_rows(named=True):
        out.setdefault(int(row["_step"]), {})[str(row["op"])] = (int(row["n"]), int(row["b"]))
    return out


@dataclass(frozen=True)
class Kinds:
    """The training steps and the steps of every other kind, most steps first."""

    training: tuple[int, ...]
    others: tuple[tuple[int, ...], ...]


def split(
    signatures: dict[int, Signature], steps: pl.DataFrame, meta: dict[int, dict[str, Any]]
) -> Kinds | None:
    """The run's kinds of iteration from its steps' ``signatures``; None when every
    step is of one kind, there are too few steps to tell a kind from an accident
    (fewer than four), or the steps are windows of time, not iterations
    (:func:`~syncpace.analysis.collectives.windowed`: a window's calls depend on where
    its edges fall). A kind of one step stays with the training iterations: a one-off
    (the first iteration's buffer broadcasts) is the stall detector's."""
    if windowed(meta):
        return None
    signatures = dict(signatures)
    # a step without any call has the empty signature: an iteration of its own kind
    for s in steps["step"].unique().to_list() if steps.height else []:
        signatures.setdefault(int(s), {})
    if len(signatures) < 4:
        return None
    groups = classify(signatures)
    others = [g for g in groups[1:] if len(g) > 1]
    if not others:
        return None
    training = sorted(s for g in groups if g is groups[0] or len(g) == 1 for s in g)
    return Kinds(tuple(training), tuple(tuple(g) for g in others))


def keep_instances(matched: Matched, kinds: Kinds) -> Matched:
    """``matched`` with the instances of the training steps only, its events' instance
    ids renumbered (those of other steps' calls: -1). Matching ran over every step, as
    the streamed windows match them, so both paths measure alike."""
    inst = matched.instances
    keep = inst["step"].is_in(list(kinds.training)).to_numpy()
    ids = np.where(keep, np.cumsum(keep) - 1, -1)
    old = matched.events.instance
    renumbered = np.where(old >= 0, ids[np.clip(old, 0, None)], -1) if len(ids) else old
    return dataclasses.replace(
        matched,
        instances=inst.filter(pl.Series(keep)),
        events=dataclasses.replace(matched.events, instance=renumbered),
    )


def step_times(steps: pl.DataFrame) -> dict[int, float]:
    """Every step's job-wide time (ns), all kinds together (before the split)."""
    times = iterations.global_steps(iterations.rank_steps(steps))
    return dict(zip(times["step"].to_list(), times["time_ns"].to_list(), strict=True))


def _period(steps: tuple[int, ...]) -> int | None:
    """k when ``steps`` are every k-th step (at least three of them), else None."""
    if len(steps) < 3:
        return None
    gaps = {b - a for a, b in zip(steps, steps[1:], strict=False)}
    return gaps.pop() if len(gaps) == 1 else None


def _calls(signatures: dict[int, Signature], steps: tuple[int, ...]) -> dict[str, Any]:
    """The typical (median-step) calls per operation of ``steps``: count and bytes."""
    out: dict[str, Any] = {}
    ops = sorted({op for s in steps for op in signatures.get(s, {})})
    for op in ops:
        pairs = sorted(signatures.get(s, {}).get(op, (0, 0)) for s in steps)
        n, b = pairs[len(pairs) // 2]
        out[op] = {"calls": n, "bytes": b}
    return out


def describe(
    kinds: Kinds, signatures: dict[int, Signature], step_times: dict[int, float]
) -> list[dict[str, Any]]:
    """The other kinds, for the JSON and the note: their steps (and period), their
    calls per step against the training iterations', their time and share of the run.
    ``step_times``: every step's job-wide time (ns), measured before the split."""
    train_calls = _calls(signatures, kinds.training)
    total = sum(step_times.values()) or 1.0
    train_ns = [step_times[s] for s in kinds.training if s in step_times]
    train_mean = sum(train_ns) / len(train_ns) if train_ns else 0.0
    out = []
    for steps in kinds.others:
        times = [step_times[s] for s in steps if s in step_times]
        mean = sum(times) / len(times) if times else 0.0
        calls = _calls(signatures, steps)
        out.append(
            {
                "steps": list(steps),
                "count": len(steps),
                "every": _period(steps),
                "calls": calls,
                "calls_per_step": sum(c["calls"] for c in calls.values()),
                "training_calls": train_calls,
                "training_calls_per_step": sum(c["calls"] for c in train_calls.values()),
                "time_mean_ns": mean,
                "training_time_mean_ns": train_mean,
                "time_ns": sum(times),
                "share_of_run": sum(times) / total,
            }
        )
    return out
