"""A job's own collectives in flight together are not contention.

Each iteration below runs one 64 MiB all-reduce alone, then three more issued together
(``async_op``, each on its own process group), which share the links and so each take
three times as long. The fabric's link counters carry exactly the job's bytes: the slow
transfers are the job sharing its own links (bandwidth). With traffic that is not the
job's on one host's link, that host is the source of contention.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import linkcounters
from syncpace.analysis.api import analyze
from syncpace.trace import RankTraceWriter

MS = 1_000_000
WORLD, STEPS, NBYTES = 4, 24, 64 << 20
ALONE = 40 * MS  # one all-reduce alone on the links
TOGETHER = 3  # all-reduces in flight together, each at a third of the rate
COMPUTE, GAP = 60 * MS, 20 * MS
RATE_BPS = 100_000_000_000
#: what a rank of an all-reduce of n ranks sends (and receives): 2(n-1)/n of its bytes
PER_RANK_PER_STEP = (1 + TOGETHER) * NBYTES * 2 * (WORLD - 1) / WORLD
NODES = ("node0", "node1")


def write_run(root: Path) -> list[int]:
    """The trace; returns each step's end (ns), the same on every rank."""
    writers = [
        RankTraceWriter(
            root,
            r,
            {
                "world_size": WORLD,
                "host": NODES[r // 2],
                "local_rank": r % 2,
                "node_rank": r // 2,
                "clock": {"offset_ns": 0, "uncertainty_ns": 1000},
            },
            offset_ns=lambda: 0,
        )
        for r in range(WORLD)
    ]
    ends, start = [], 0
    for k in range(STEPS):
        alone_at = start + COMPUTE
        together_at = alone_at + ALONE + GAP
        end = together_at + TOGETHER * ALONE
        for r in range(WORLD):
            calls = [("0", k, alone_at, alone_at + ALONE)]
            calls += [(str(g), k, together_at + r * 1000, end) for g in range(1, TOGETHER + 1)]
            for group, seq, enter, exit_ in calls:
                writers[r].add_event(
                    (r, k, group, WORLD, seq, "all_reduce", NBYTES, "float32", -1, enter, exit_)
                    + ("simulated", "completed", None, -1)
                )
            writers[r].add_step((r, k, start, end, 0))
        ends.append(end)
        start = end
    for w in writers:
        w.close()
    return ends


def write_links(root: Path, ends: list[int], extra_bps: float) -> None:
    """The fabric's link counters, sampled at every step's end: each host link carries
    its two ranks' bytes both ways (nothing of an all-reduce stays inside a host of a
    ring over both), and ``extra_bps`` more from node1 towards its leaf."""
    times = [0, *ends]

    def nbytes(d: linkcounters.Direction, t: int) -> int:
        job = int(2 * PER_RANK_PER_STEP * times.index(t))
        return job + (int(extra_bps * t / 1e9) if d[1] == "node1" else 0)

    directions = linkcounters.star(NODES, lambda _: RATE_BPS, switch="leaf")
    linkcounters.write_links(root, directions, times, nbytes)


def test_the_jobs_own_concurrent_calls_are_not_contention(tmp_path: Path) -> None:
    root = tmp_path / "run"
    write_links(root, write_run(root), extra_bps=0.0)
    analysis = analyze(root)
    modes = {f.mode: f for f in analysis.findings}
    assert "fabric_contention" not in modes, [f.summary for f in analysis.findings]
    # the premise: three of each iteration's four transfers take three times the first
    inst = analysis.runs[0].instances
    slow = inst.filter(inst["group"] != "0")
    assert slow.height == TOGETHER * (STEPS - 1)  # the first iteration is warm-up
    assert float(slow["transfer_ns"].median()) == pytest.approx(TOGETHER * ALONE, rel=0.01)


def test_other_traffic_on_one_link_is_contention_from_its_host(tmp_path: Path) -> None:
    root = tmp_path / "run"
    write_links(root, write_run(root), extra_bps=4e9)
    analysis = analyze(root)
    modes = {f.mode: f for f in analysis.findings}
    assert "fabric_contention" in modes, [f.summary for f in analysis.findings]
    finding = modes["fabric_contention"]
    assert finding.source[0] == "node1"
    assert "host link node1→leaf" in finding.source
    assert "node0" not in finding.source
    shares = finding.evidence["other_traffic_share_by_link"]
    assert set(shares) == {"host link node1→leaf"}
    iteration_s = analysis.runs[0].iteration_ns / 1e9
    job_bps = 2 * PER_RANK_PER_STEP / iteration_s
    # 4 GB/s beside the job's bytes, as a share of what the link carried
    assert shares["host link node1→leaf"] == pytest.approx(4e9 / (4e9 + job_bps), abs=0.02)
    assert "host link node1→leaf carries traffic beside the job's" in finding.summary
