"""A small blocking call's own host time (from its issue to its wait: dispatch, the
tracer, the hand-off to the backend's thread, a preemption now and then) goes with the
call when small calls are bucketed, however long it was. On hand-built traces of a job
and of the same job with its small calls coalesced into one (the fix, run), so the
saving bucketing would bring is known from the two timelines, not from the analysis.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.analysis.onehost import write_one_host

from syncpace.analysis.api import analyze
from syncpace.analysis.thresholds import Thresholds

RANKS = 2
ALPHA_MS = 0.3  # each call's latency
BUCKET = 256 * 1024
PER_BUCKET_MS = 2.0  # a 256 KiB bucket's bytes
ISSUE_MS = 0.05  # a call's own host time, most of the time
SMALL = 40


def _took(nbytes: int) -> float:
    return ALPHA_MS + PER_BUCKET_MS * nbytes / BUCKET


def job(root: Path, calls: list[int], pause_ms: float = 0.0, steps: int = 10) -> float:
    """Each step every rank computes 20 ms, then makes the blocking all-reduces of
    ``calls`` bytes, then ends. A call's own host time is ``ISSUE_MS``; every fifth
    small call (under 1 KiB) of a step, one rank in turn is preempted inside it for
    ``pause_ms`` more. A call completes its latency and bytes' time after the last
    rank got to its wait, and each rank issues the next 0.02 ms after. Returns the mean
    iteration in ms."""
    events: dict[int, list] = {r: [] for r in range(RANKS)}
    marks: dict[int, list] = {r: [] for r in range(RANKS)}
    t, seq, k = 0.0, 0, 0
    for s in range(steps):
        at = t + 20
        for nbytes in calls:
            own = [ISSUE_MS] * RANKS
            if nbytes < 1024:
                if k % 5 == 0:
                    own[(k // 5) % RANKS] += pause_ms
                k += 1
            waits = [at + own[r] for r in range(RANKS)]
            done = max(waits) + _took(nbytes)
            for r in range(RANKS):
                events[r].append((s, seq, nbytes, at, waits[r], done, "wait"))
            at, seq = done + 0.02, seq + 1
        for r in range(RANKS):
            marks[r].append((s, t, at))
        t = at
    write_one_host(root, events, marks)
    return t / steps


BUCKETS = [BUCKET, BUCKET // 2, BUCKET, BUCKET // 4]


@pytest.mark.parametrize("pause_ms", [0.0, 1.5])
def test_bucketing_saves_the_small_calls_own_host_time_too(tmp_path: Path, pause_ms: float) -> None:
    """40 small calls a step, and (second case) every fifth with a rank preempted for
    1.5 ms inside it: 8 pauses a step, 12 ms of a 53.8 ms iteration. The job with those
    calls coalesced into one makes neither the 40 latencies nor the pauses: 27.4 ms, 49 %
    shorter (35 % without the pauses). Before, a call's host time went with it only
    below one latency (0.3 ms), so the pauses stayed in the replay: 26 % predicted."""
    planted = job(tmp_path / "planted", BUCKETS + [64] * SMALL, pause_ms)
    fixed = job(tmp_path / "fixed", BUCKETS + [64 * SMALL])
    measured = (planted - fixed) / planted
    assert measured > 0.25, f"the small calls cost {measured:.1%}: not the case"
    analysis = analyze(tmp_path / "planted", Thresholds())
    found = [(f.mode, round(f.cost, 3)) for f in analysis.findings]
    assert analysis.findings[0].mode == "latency_bound", found
    assert analysis.findings[0].cost == pytest.approx(measured, abs=0.01), (
        f"measured {measured:.1%}: {found}"
    )


def spread_job(root: Path, steps: int = 10) -> float:
    """Each step every rank makes the blocking all-reduces of ``BUCKETS``, then computes
    3 ms and posts an asynchronous 64-byte all-reduce, five times (each done
    ``ALPHA_MS`` x 6 = 1.8 ms later, seen by its completion callback), and ends 1 ms
    after the last is done. The small calls run beside the compute; the last one's
    1.8 ms are exposed. Returns the mean iteration in ms."""
    took = 6 * ALPHA_MS
    events: dict[int, list] = {r: [] for r in range(RANKS)}
    marks: dict[int, list] = {r: [] for r in range(RANKS)}
    t, seq = 0.0, 0
    for s in range(steps):
        at = t
        for nbytes in BUCKETS:
            done = at + ISSUE_MS + _took(nbytes)
            for r in range(RANKS):
                events[r].append((s, seq, nbytes, at, at + ISSUE_MS, done, "wait"))
            at, seq = done + 0.02, seq + 1
        for _ in range(5):
            at += 3.0
            for r in range(RANKS):
                events[r].append((s, seq, 64, at, -1.0, at + took, "future"))
            seq += 1
        end = at + took + 1.0
        for r in range(RANKS):
            marks[r].append((s, t, end))
        t = end
    write_one_host(root, events, marks)
    return t / steps


def test_asynchronous_calls_spread_over_compute_are_not_one_bucket(tmp_path: Path) -> None:
    """Five small asynchronous calls a step, each posted after 3 ms of compute and done
    1.8 ms later, beside the next compute. Bucketed into one at the end they would take
    the same 1.8 ms after the last compute: no saving. Priced as one bucket paying one
    latency between five calls left where they were, they would save most of the last
    call's exposed time, a saving no change to the job can make."""
    spread_job(tmp_path / "run")
    analysis = analyze(tmp_path / "run", Thresholds(latency_min_per_step=0))
    rows = {o.name: o for o in analysis.what_if[0].rows}
    assert "coalesced" in rows, list(rows)
    assert rows["coalesced"].saving == pytest.approx(0.0, abs=0.005), rows["coalesced"]
