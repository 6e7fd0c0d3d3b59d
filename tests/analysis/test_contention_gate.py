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


def write_run(root: Path, contention: bool, slow_steps: set[int] | None = None) -> Path:
    """``slow_steps``: the steps whose transfers are 3x slower (the second half)."""
    slow_steps = set(range(STEPS // 2, STEPS)) if slow_steps is None else slow_steps
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
        slow = k in slow_steps
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


def write_nic_counters(
    root: Path, other_bps: float, flows: dict[str, tuple[float, float]] | None = None
) -> None:
    """Each node's eth0 counters over the run: the job's bytes (its ranks' all-reduce
    bytes x 2(n-1)/n, spread evenly) plus ``other_bps`` of traffic that is not the job's
    each way, or ``flows``: per node, that traffic received and sent (bytes/s)."""
    from syncpace.trace.hostwriter import CountersWriter, host_paths, write_host_meta
    from syncpace.trace.reader import load_trace

    trace = load_trace(root)
    t0 = int(trace.steps["start_ns"].min())
    t1 = int(trace.steps["end_ns"].max())
    job_bps = 2 * (64 << 20) * 2 * (WORLD - 1) / WORLD * STEPS / ((t1 - t0) / 1e9)
    times = list(range(t0, t1 + 50 * MS, 50 * MS))
    series = [("nic", "eth0", -1, c) for c in ("rx_bytes", "tx_bytes", "link_rate_bps")]
    for node in ("node0", "node1"):
        meta, counters = host_paths(root, node)
        write_host_meta(meta, {"host": node})
        w = CountersWriter(counters, node)
        rx_other, tx_other = (flows or {}).get(node, (other_bps, other_bps))
        for t in times:
            rx = int((job_bps + rx_other) * (t - t0) / 1e9)
            tx = int((job_bps + tx_other) * (t - t0) / 1e9)
            w.write([t] * 3, [0, 1, 2], [rx, tx, 100_000_000_000], series)
        w.close()


def test_the_host_sending_other_traffic_is_its_source_not_the_one_receiving_it(tmp_path):
    """node1 sends 4 GB/s that is not the job's to node0: both NICs carry it, but it
    comes from node1, the finding's source; node0, where it ends, is not named so."""
    root = write_run(tmp_path, contention=False)
    write_nic_counters(root, 0.0, flows={"node0": (4e9, 0.0), "node1": (0.0, 4e9)})
    analysis = analyze(root)
    (finding,) = [f for f in analysis.findings if f.mode == "fabric_contention"]
    assert set(finding.evidence["other_traffic_share_by_host"]) == {"node0", "node1"}
    assert finding.source == ("node1",), finding.source


@pytest.mark.parametrize(("other_bps", "expect_fabric"), [(0.0, False), (4e9, True)])
def test_other_traffic_on_the_links_is_contention_whatever_the_late_rank_does(
    tmp_path, other_bps, expect_fabric
):
    """The CPU straggler's run again, now with its hosts' NIC counters. With only the
    job's bytes on the links it stays a straggler; when the NICs carry 4 GB/s the job
    did not send, the links are shared with other flows: contention, named with the
    share of other traffic per host."""
    root = write_run(tmp_path, contention=False)
    write_nic_counters(root, other_bps)
    analysis = analyze(root)
    assert analysis.runs[0].hosts is not None
    modes = {f.mode: f for f in analysis.findings}
    assert ("fabric_contention" in modes) is expect_fabric, [f.summary for f in analysis.findings]
    assert "slow_link" not in modes and "bandwidth_bound" not in modes
    if expect_fabric:
        finding = modes["fabric_contention"]
        shares = finding.evidence["other_traffic_share_by_host"]
        job_bps = 2 * (64 << 20) * 1.5 * STEPS / (analysis.runs[0].iteration_ns * STEPS / 1e9)
        # 4 GB/s of other traffic beside the job's (an upper bound of its NIC bytes)
        assert set(shares) == {"node0", "node1"}
        for share in shares.values():
            assert share == pytest.approx(4e9 / (4e9 + job_bps), abs=0.05)
        assert finding.nodes == ("node0", "node1")
        assert "other traffic" in finding.summary


@pytest.mark.parametrize(
    ("slow_steps", "expect_fabric"),
    [
        (set(range(26, STEPS)), True),  # flows over the last 35 % of the run
        (set(range(1, STEPS, 4)), False),  # as many slow transfers, scattered: noise
        (set(range(STEPS - 3, STEPS)), False),  # too short an episode to be contention
    ],
)
def test_contention_over_less_than_half_the_run_is_seen_in_its_episode(
    tmp_path, slow_steps, expect_fabric
):
    """The median transfer is a clean one when flows covered less than half the run;
    consecutive inflated transfers (an episode) covering a quarter of them are still
    contention, scattered ones are not."""
    analysis = analyze(write_run(tmp_path, True, slow_steps))
    modes = {f.mode: f for f in analysis.findings}
    assert ("fabric_contention" in modes) is expect_fabric, [f.summary for f in analysis.findings]
    if expect_fabric:
        evidence = modes["fabric_contention"].evidence
        assert evidence["inflation_p50_all"] == pytest.approx(1.0, abs=0.05)
        assert evidence["median_inflation"] == pytest.approx(4.0, rel=0.05)  # the episode's
        assert evidence["episode_share"] == pytest.approx(14 / 39, abs=0.03)
