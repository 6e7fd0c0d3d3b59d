"""Small calls all of one size, priced from the links' capacity.

A run of one size of calls cannot tell from itself how much of a call's time is
latency and how much its bytes. Where the links' capacity is known (here the fabric's
host links, 100 Mbit/s each, from its counters) the bytes' time is their time at it
and the latency the rest. Two hosts, one rank each: every call crosses both host links.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.linkcounters import star, write_links

from syncpace.analysis.api import analyze
from syncpace.analysis.findings import Severity
from syncpace.trace.writer import RankTraceWriter

MS = 1_000_000
HOSTS = ["h0", "h1"]
RATE_BPS = 100_000_000
COMPUTE_MS, AFTER_MS, STEPS = 20.0, 1.0, 12


def bytes_ms(nbytes: int) -> float:
    """An all-reduce's bytes at the host link's rate: two hosts, 2(n-1)/n = 1."""
    return nbytes / (RATE_BPS / 8) * 1e3


def job(root: Path, calls: int, nbytes: int, latency_ms: float, rates: dict[str, int]) -> Path:
    """Each step each rank computes, then makes ``calls`` blocking all-reduces of
    ``nbytes``, each ``latency_ms`` plus its bytes at the link's rate; the fabric's
    counters declare each host's link at ``rates`` (no bytes on them: rates only)."""
    took = latency_ms + bytes_ms(nbytes)
    events: dict[int, list] = {0: [], 1: []}
    marks: dict[int, list] = {0: [], 1: []}
    t, seq = 0.0, 0
    for s in range(STEPS):
        at = t + COMPUTE_MS
        for _ in range(calls):
            for r in (0, 1):
                events[r].append((s, seq, int((at - 0.01 * (2 - r)) * MS), int((at + took) * MS)))
            at, seq = at + took, seq + 1
        for r in (0, 1):
            marks[r].append((s, int(t * MS), int((at + AFTER_MS) * MS)))
        t = at + AFTER_MS
    for rank, host in enumerate(HOSTS):
        meta = {
            "world_size": 2,
            "host": host,
            "local_rank": 0,
            "clock": {"offset_ns": 0, "uncertainty_ns": 0},
            "groups": {"0": {"ranks": [0, 1], "backend": "gloo"}},
            "source": "synthetic",
        }
        w = RankTraceWriter(root, rank, meta, flush_interval_s=3600, offset_ns=lambda: 0)
        for step, sq, enter, exit_ in events[rank]:
            row = (rank, step, "0", 2, sq, "all_reduce", nbytes, "float32", -1)
            w.add_event((*row, enter, exit_, "wait", "completed", None, enter))
        for step, start, end in marks[rank]:
            w.add_step((rank, step, start, end, 0))
        w.close()
    write_links(root, star(HOSTS, lambda h: rates[h]), range(0, int((t + 200) * MS), 100 * MS))
    return root


def _latency(analysis):
    found = [f for f in analysis.findings if f.mode == "latency_bound"]
    return found[0] if found else None


def test_twelve_small_calls_of_one_size_are_priced_at_the_links_capacity(tmp_path: Path) -> None:
    """12 calls of 64 bytes a step (fewer than ``latency_min_per_step``), 1 ms each:
    their bytes take 5 us at 100 Mbit/s, the rest is latency. Bucketed into one they
    pay one latency and twelve bytes' times: each iteration (33.06 ms) loses 11 of its
    latencies."""
    calls, latency = 12, 1.0
    analysis = analyze(job(tmp_path, calls, 64, latency, dict.fromkeys(HOSTS, RATE_BPS)))
    found = _latency(analysis)
    assert found is not None, [f.summary for f in analysis.findings]
    assert found.severity == Severity.CRITICAL
    iteration_ms = COMPUTE_MS + calls * (latency + bytes_ms(64)) + AFTER_MS
    assert found.cost == pytest.approx((calls - 1) * latency / iteration_ms, abs=0.005)
    assert found.evidence["latency_us"] == pytest.approx(latency * 1e3, rel=0.01)
    assert found.evidence["bytes_at"].startswith("the hosts' link rate, 100 Mbit/s")
    assert found.evidence["small_per_iteration"] == pytest.approx(calls)
    assert analysis.top.mode == "latency_bound"


def test_the_jobs_own_buckets_of_one_size_are_not_named(tmp_path: Path) -> None:
    """A healthy job of four 32 KiB buckets a step at 400 Mbit/s, each 3 ms of latency
    beside 0.66 ms of bytes: at the links' capacity they would be latency-bound, but the
    calls need not reach it (a loaded machine's gloo moves bytes at a fraction of it);
    at 1/64 of it their bytes take longer than the latency, so they are left alone."""
    rates = dict.fromkeys(HOSTS, 4 * RATE_BPS)
    analysis = analyze(job(tmp_path, 4, 32 << 10, 3.0, rates))
    assert _latency(analysis) is None, _latency(analysis).summary


def test_a_slow_host_link_keeps_the_count_rule(tmp_path: Path) -> None:
    """The first test's calls with h1's link set to a quarter of h0's: a slow link makes
    every call slow alike, which one size cannot tell from latency; 12 calls a step stay
    below the count that names them."""
    rates = {"h0": RATE_BPS, "h1": RATE_BPS // 4}
    analysis = analyze(job(tmp_path, 12, 64, 1.0, rates))
    assert _latency(analysis) is None, _latency(analysis).summary
