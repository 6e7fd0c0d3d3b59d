"""Few small calls a step, judged by what bucketing them saves in the replay, on
hand-built traces whose every number is known: the latency a bucket pays once comes
from the run's smallest calls, the bytes' time from the rate its largest calls moved
bytes at, and the job's own buckets, whose bytes take longer than that latency, are
never bucketed again."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.analysis.onehost import write_one_host

from syncpace.analysis.api import analyze
from syncpace.analysis.findings import Severity
from syncpace.analysis.thresholds import Thresholds

MS = 1_000_000
RANKS = 4
#: each call's latency, and a 256 KiB bucket's bytes at 2 ms
ALPHA_MS = 0.5
BUCKET = 256 * 1024
BUCKET_MS = ALPHA_MS + 2.0


def job(root: Path, small: int, buckets: tuple[int, ...] = (BUCKET,) * 4, steps: int = 10) -> Path:
    """Each step every rank computes 20 ms, then makes ``small`` blocking 64-byte
    all-reduces of ``ALPHA_MS`` each, then blocking all-reduces of ``buckets`` bytes
    (``ALPHA_MS`` plus 2 ms per 256 KiB each), then ends 1 ms later; one host."""
    calls = [(64, ALPHA_MS)] * small + [(b, ALPHA_MS + 2.0 * b / BUCKET) for b in buckets]
    events: dict[int, list] = {r: [] for r in range(RANKS)}
    marks: dict[int, list] = {r: [] for r in range(RANKS)}
    t, seq = 0.0, 0
    for s in range(steps):
        at = t + 20
        for nbytes, took in calls:
            done = at + took
            for r in range(RANKS):
                enter = at - 0.01 * (RANKS - r)  # rank 3 arrives last; blocking: waits at once
                events[r].append((s, seq, nbytes, enter, enter, done, "wait"))
            at, seq = done, seq + 1
        for r in range(RANKS):
            marks[r].append((s, t, at + 1))
        t = at + 1
    write_one_host(root, events, marks)
    return root


def _latency(analysis):
    found = [f for f in analysis.findings if f.mode == "latency_bound"]
    return found[0] if found else None


def test_six_small_calls_a_step_are_named_at_what_bucketing_them_saves(tmp_path: Path) -> None:
    """6 calls of 0.5 ms a step (fewer than ``latency_min_per_step``) in a 34 ms
    iteration: bucketed into one they take 0.5 ms and their 384 bytes' time, so each
    iteration is 2.5 ms (7.4 %) shorter. The four 256 KiB buckets are left as they are."""
    analysis = analyze(job(tmp_path, small=6))
    found = _latency(analysis)
    assert found is not None, [f.mode for f in analysis.findings]
    assert found.severity == Severity.WARNING
    assert found.cost == pytest.approx(2.5 / 34, abs=0.003)
    assert found.evidence["small_per_iteration"] == pytest.approx(6)
    assert found.evidence["latency_us"] == pytest.approx(ALPHA_MS * 1e3, rel=0.01)
    # the largest calls' rate: 256 KiB in 2.5 ms; its latency knee, 0.5 ms of it
    rate = BUCKET / (BUCKET_MS * MS)
    assert found.evidence["estimated_knee_bytes"] == pytest.approx(ALPHA_MS * MS * rate, rel=0.01)
    assert "6 collectives per iteration" in found.summary
    assert "7.4% shorter" in found.summary


def test_the_jobs_own_buckets_are_not_named_even_with_no_count_asked(tmp_path: Path) -> None:
    """The same job without the small calls, and no count asked of the small calls:
    three 256 KiB buckets and a 32 KiB one a step, every one below 1 MiB. Bucketed at
    free bytes they would save most of their time (a latency-bound verdict on a
    healthy job); at the rate the run's largest calls moved bytes at, the 32 KiB one
    alone is below the latency knee and, one a step, bucketing it saves nothing."""
    analysis = analyze(
        job(tmp_path, small=0, buckets=(BUCKET, BUCKET, BUCKET, 32 * 1024)),
        Thresholds(latency_min_per_step=0),
    )
    found = _latency(analysis)
    assert found is None or found.severity == Severity.INFO, found.summary
    if found is not None:
        assert found.cost == pytest.approx(0.0, abs=0.005)
        assert found.evidence["small_per_iteration"] == pytest.approx(1)


def test_a_few_small_calls_worth_less_than_the_threshold_are_not_named(tmp_path: Path) -> None:
    """Two calls a step: bucketed, 0.5 ms of 29 ms (1.7 %), below the reporting
    threshold: no finding."""
    analysis = analyze(job(tmp_path, small=2))
    assert _latency(analysis) is None, _latency(analysis).summary
