"""Skew that rises with transfer time: inherited from contention, or a CPU straggler?

Both runs below inflate cross-node transfers 3x in their second half and make rank 1
late in step with it. Under contention rank 1 is late because its previous
all-reduce ended late for it (unequal link shares); as a CPU straggler it is late
because it computes longer. Only the first is fabric contention.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from syncpace.analysis.api import analyze
from syncpace.trace import RankTraceWriter

MS = 1_000_000
WORLD, STEPS, SERVICE, COMPUTE = 4, 40, 40 * MS, 100 * MS


def write_run(root: Path, contention: bool) -> Path:
    writers = [
        RankTraceWriter(
            root,
            r,
            {
                "world_size": WORLD,
                "host": f"node{r // 2}",
                "local_rank": r % 2,
                "node_rank": r // 2,
                "clock": {"offset_ns": 0, "uncertainty_ns": 1000},
            },
            offset_ns=lambda: 0,
        )
        for r in range(WORLD)
    ]
    prev_exit = [0] * WORLD
    for k in range(STEPS):
        slow = k >= STEPS // 2
        service = SERVICE * (3 if slow else 1)
        extra = service // 3 if slow else 0  # how late rank 1 is, either way
        enter = []
        for r in range(WORLD):
            compute = COMPUTE + (extra if (r == 1 and not contention) else 0)
            enter.append(prev_exit[r] + compute)
        last = max(enter)
        for r in range(WORLD):
            lag = extra if (r == 1 and contention) else 0  # its share of the link was smaller
            exit_ = last + service + lag
            writers[r].add_event(
                (
                    r,
                    k,
                    "0",
                    WORLD,
                    k,
                    "all_reduce",
                    64 << 20,
                    "float32",
                    -1,
                    enter[r],
                    exit_,
                    "simulated",
                    "completed",
                    None,
                    -1,
                )
            )
            writers[r].add_step((r, k, prev_exit[r], exit_, 0))
            prev_exit[r] = exit_
    for w in writers:
        w.close()
    return root


@pytest.mark.parametrize(("contention", "expect_fabric"), [(True, True), (False, False)])
def test_inherited_skew_is_contention_own_lateness_is_not(tmp_path, contention, expect_fabric):
    analysis = analyze(write_run(tmp_path, contention))
    modes = {f.mode: f for f in analysis.findings}
    assert ("fabric_contention" in modes) is expect_fabric, [f.summary for f in analysis.findings]
    if expect_fabric:
        evidence = modes["fabric_contention"].evidence
        # the instance ends when rank 1's share finishes: 3x service plus its third
        assert evidence["median_inflation"] == pytest.approx(4.0, rel=0.05)
        assert evidence["own_lateness_transfer_correlation"] < 0.1
        assert evidence["skew_transfer_correlation"] > 0.5  # skew follows, inherited
