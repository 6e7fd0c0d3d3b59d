"""A cause that never lets up, costed against the links' capacity, not the run's best.

One host's link is slow from the first iteration to the last: every transfer of the
ring crosses it, so the run's best transfer is as slow as the rest and "every link at
the run's best rate" saves nothing. Where the links' capacity is known (the fabric's
declared host links, a set link rate) the slow link is costed against it; where it is
not, the finding says its baseline is the run's own best.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.analysis.test_mechanisms import FOUR_HOSTS, job
from tests.linkcounters import star, write_links

from syncpace.analysis import Severity, Thresholds, analyze

MS = 1_000_000
NBYTES = 8 << 20
RATE_BPS = 8_000_000_000  # 1 GB/s
#: an all-reduce of 4 ranks moves 2(n-1)/n of its bytes over each host's link
HEALTHY_MS = NBYTES * 1.5 / 1e9 * 1e3
SLOW = 4  # node0's link at a quarter of the others' rate
LAG_MS = 0.25 * HEALTHY_MS  # ranks 0 and 1, either end of it, see each transfer end last
COMPUTE_MS, AFTER_MS = 20.0, 1.0


def slow_link_run(root: Path, *, declared: bool, lagging: tuple[int, ...] = (0, 1)) -> Path:
    """The ring's transfers at node0's rate all run long; with ``declared``, the
    fabric's link counters declare every host link's rate (node0's a quarter).
    ``lagging``: the ranks whose collectives end last."""
    job(
        root,
        hosts=FOUR_HOSTS,
        compute=lambda r, s: COMPUTE_MS,
        transfer=lambda s: SLOW * HEALTHY_MS,
        lag=lambda r, s: LAG_MS if r in lagging else 0.0,
        nbytes=NBYTES,
        after=AFTER_MS,
    )
    if declared:
        rate = lambda h: RATE_BPS // SLOW if h == "node0" else RATE_BPS  # noqa: E731
        write_links(root, star(FOUR_HOSTS, rate), range(0, 10 * 10**9, 10**9))
    return root


def test_a_link_slow_all_run_is_costed_against_the_peers_declared_rate(tmp_path: Path) -> None:
    analysis = analyze(slow_link_run(tmp_path, declared=True))
    top = analysis.top
    assert top.mode == "slow_link", [f.summary for f in analysis.findings]
    # the counters name the slow link's host; both ends of it lag
    assert top.ranks == (0,) and top.severity == Severity.CRITICAL
    assert top.evidence["lagging_ranks"] == [0, 1]
    # the same job on healthy links: each transfer at the peers' rate, no lag
    slow_ms = COMPUTE_MS + SLOW * HEALTHY_MS + LAG_MS + AFTER_MS
    healthy_ms = COMPUTE_MS + HEALTHY_MS + AFTER_MS
    assert top.cost == pytest.approx(1 - healthy_ms / slow_ms, abs=0.01)
    baseline = top.evidence["baseline"]
    assert baseline["gbps"] == pytest.approx(1.0)
    assert baseline["source"] == "the hosts' link rate"
    assert "fabric-links.arrow" in baseline["read_from"]
    assert "at the hosts' link rate, 8 Gbit/s" in top.summary
    # the bytes at the healthy rate are what is left of bandwidth, after the slow link
    bandwidth = [f for f in analysis.findings if f.mode == "bandwidth_bound"]
    assert all(f.cost < top.cost for f in bandwidth)
    if bandwidth:
        assert bandwidth[0].cost == pytest.approx(HEALTHY_MS / slow_ms, abs=0.01)


def test_without_a_known_rate_the_slow_link_says_its_saving_may_be_understated(
    tmp_path: Path,
) -> None:
    analysis = analyze(slow_link_run(tmp_path, declared=False))
    (finding,) = [f for f in analysis.findings if f.mode == "slow_link"]
    assert finding.ranks == (0, 1)
    assert finding.evidence["baseline"] == "the run's own best"
    assert "the baseline is the run's own best transfers" in finding.summary
    assert "the saving may be understated" in finding.summary
    # only the lag the ranks next to it see is removed: the ring stays slow
    slow_ms = COMPUTE_MS + SLOW * HEALTHY_MS + LAG_MS + AFTER_MS
    assert finding.cost == pytest.approx(LAG_MS / slow_ms, abs=0.005)


def test_the_counters_name_the_slow_link_where_the_lag_points_elsewhere(tmp_path: Path) -> None:
    """Collectives end last at ranks 2 and 3 (the ring's last hop decides where), while
    the fabric's counters show node0's link set to a quarter of the others' rate: the
    finding names node0 and its ranks, and keeps the lag as evidence. Without the
    counters the lag is all there is, and ranks 2 and 3 are named."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    counted = analyze(slow_link_run(tmp_path / "a", declared=True, lagging=(2, 3)))
    (found,) = [f for f in counted.findings if f.mode == "slow_link"]
    print(found.summary)
    assert found.ranks == (0,) and found.nodes == ("node0",)
    assert found.evidence["lagging_ranks"] == [2, 3]
    assert found.evidence["slow_host_links_bps"] == {"node0": RATE_BPS // SLOW}
    assert found.summary.startswith(
        "host link of node0 set to 2 Gbit/s, the fastest 8 Gbit/s (link counters): "
        "rank 0 (node0) behind it; collectives end late at ranks 2, 3"
    )
    slow_ms = COMPUTE_MS + SLOW * HEALTHY_MS + LAG_MS + AFTER_MS
    healthy_ms = COMPUTE_MS + HEALTHY_MS + AFTER_MS
    assert found.cost == pytest.approx(1 - healthy_ms / slow_ms, abs=0.01)
    lag_only = analyze(slow_link_run(tmp_path / "b", declared=False, lagging=(2, 3)))
    (found,) = [f for f in lag_only.findings if f.mode == "slow_link"]
    assert found.ranks == (2, 3) and found.evidence["slow_host_links_bps"] == {}


def test_a_set_link_rate_is_a_ceiling_no_counterfactual_goes_past(tmp_path: Path) -> None:
    """Transfers of 4 ms in the first half of the run and 12 ms in the second; the
    link rate set allows 8 ms at best. "Every link at the run's best" would make the
    slow ones 4 ms; held to the rate they take 8 ms."""
    clean, slow, rate_ms = 4.0, 12.0, 8.0
    path = job(
        tmp_path,
        hosts=FOUR_HOSTS,
        transfer=lambda s: clean if s < 20 else slow,
        nbytes=NBYTES,
    )
    link_gbps = NBYTES * 1.5 / (rate_ms * MS)  # bus bandwidth: 8 ms for these bytes
    analysis = analyze(path, Thresholds(link_gbps=link_gbps))
    table = analysis.what_if[0]
    best = table.row("links:best")
    steps = 39  # the first is warm-up
    # the 20 slow steps each lose 12 - 8 ms, the 19 clean ones nothing
    assert best.saving_ns / 1e6 == pytest.approx(20 * (slow - rate_ms) / steps, rel=0.02)
    at_rate = table.row("links:rate")
    assert at_rate.saving_ns == pytest.approx(best.saving_ns, rel=0.02)


def write_nic_counters(root: Path) -> None:
    """Each host's eth0 as the host sampler records it: its speed from sysfs (node0's
    a quarter of the others') and the job's bytes, evenly over the run."""
    from syncpace.trace.hostwriter import CountersWriter, host_paths, write_host_meta
    from syncpace.trace.reader import load_trace

    trace = load_trace(root)
    t0, t1 = int(trace.steps["start_ns"].min()), int(trace.steps["end_ns"].max())
    job_bps = NBYTES * 1.5 * 40 / ((t1 - t0) / 1e9)
    series = [("nic", "eth0", -1, c) for c in ("rx_bytes", "tx_bytes", "link_rate_bps")]
    for node in FOUR_HOSTS:
        rate = RATE_BPS // SLOW if node == "node0" else RATE_BPS
        meta, counters = host_paths(root, node)
        write_host_meta(meta, {"host": node})
        w = CountersWriter(counters, node)
        for t in range(t0, t1 + 50 * MS, 50 * MS):
            moved = int(job_bps * (t - t0) / 1e9)
            w.write([t] * 3, [0, 1, 2], [moved, moved, rate], series)
        w.close()


def test_the_nics_speeds_recorded_by_the_host_sampler_are_a_capacity_too(tmp_path: Path) -> None:
    root = slow_link_run(tmp_path, declared=False)
    write_nic_counters(root)
    analysis = analyze(root)
    top = analysis.top
    assert top.mode == "slow_link", [f.summary for f in analysis.findings]
    assert top.evidence["baseline"]["read_from"] == "a host's NICs together, host counters"
    slow_ms = COMPUTE_MS + SLOW * HEALTHY_MS + LAG_MS + AFTER_MS
    healthy_ms = COMPUTE_MS + HEALTHY_MS + AFTER_MS
    assert top.cost == pytest.approx(1 - healthy_ms / slow_ms, abs=0.01)


def test_a_benchmark_faster_than_the_line_is_held_to_the_line(tmp_path: Path) -> None:
    """A benchmark on shaped links fits the shaper's burst: here a bus bandwidth half
    again the hosts' declared 1 GB/s. No ring moves its bytes faster than its hosts'
    links carry them: the slow link is costed against the line rate, as with no
    benchmark at all, not against the benchmark's faster rate."""
    root = slow_link_run(tmp_path, declared=True)
    fast_bench = 1.5 * RATE_BPS / 8e9  # GB/s of bus bandwidth: one rank a host
    analysis = analyze(root, Thresholds(link_gbps=fast_bench))
    top = analysis.top
    assert top.mode == "slow_link", [f.summary for f in analysis.findings]
    slow_ms = COMPUTE_MS + SLOW * HEALTHY_MS + LAG_MS + AFTER_MS
    healthy_ms = COMPUTE_MS + HEALTHY_MS + AFTER_MS
    at_bench_ms = COMPUTE_MS + HEALTHY_MS / 1.5 + AFTER_MS
    print(top.cost, 1 - healthy_ms / slow_ms, 1 - at_bench_ms / slow_ms)
    assert top.cost == pytest.approx(1 - healthy_ms / slow_ms, abs=0.01)
    assert 1 - at_bench_ms / slow_ms > top.cost + 0.03  # the two are told apart


def test_ranks_sharing_a_host_send_the_factor_over_the_ranks_through_its_link(
    tmp_path: Path,
) -> None:
    """6 ranks on 3 hosts, node0's link at a quarter of the others'. Each rank sends to
    the next, so each host's link carries one edge of the ring each way, and an edge
    carries 2(n-1)/n of the bytes with n the ranks (5/3), not the hosts (4/3): a fix
    that took the healthy transfer at the factor over the hosts promised a fifth of it
    more than a healthy link gives."""
    hosts = ["node0", "node0", "node1", "node1", "node2", "node2"]
    healthy = NBYTES * 2 * 5 / 6 / 1e9 * 1e3  # ms at 1 GB/s
    job(
        tmp_path,
        hosts=hosts,
        compute=lambda r, s: COMPUTE_MS,
        transfer=lambda s: SLOW * healthy,
        lag=lambda r, s: LAG_MS if r in (0, 1) else 0.0,
        nbytes=NBYTES,
        after=AFTER_MS,
    )
    rate = lambda h: RATE_BPS // SLOW if h == "node0" else RATE_BPS  # noqa: E731
    write_links(tmp_path, star(sorted(set(hosts)), rate), range(0, 10 * 10**9, 10**9))
    analysis = analyze(tmp_path)
    (found,) = [f for f in analysis.findings if f.mode == "slow_link"]
    assert found.nodes == ("node0",), found.summary
    slow_ms = COMPUTE_MS + SLOW * healthy + LAG_MS + AFTER_MS
    healthy_ms = COMPUTE_MS + healthy + AFTER_MS
    assert found.cost == pytest.approx(1 - healthy_ms / slow_ms, abs=0.01)


def leaf_spine(hosts: list[str], host_bps, uplink_bps: int) -> list:
    """Two leaves of two hosts each (the first two on leaf0), one spine."""
    out = []
    for i, h in enumerate(hosts):
        leaf = f"leaf{i // 2}"
        out += [(f"{h}-{leaf}", h, leaf, "host", host_bps(h))]
        out += [(f"{h}-{leaf}", leaf, h, "host", host_bps(h))]
    for leaf in ("leaf0", "leaf1"):
        out += [(f"{leaf}-spine", leaf, "spine", "uplink", uplink_bps)]
        out += [(f"{leaf}-spine", "spine", leaf, "uplink", uplink_bps)]
    return out


def test_a_slow_host_link_behind_a_slower_uplink_costs_nothing(tmp_path: Path) -> None:
    """4 hosts on two leaves whose uplinks run at half the hosts' rate; node0's link at
    three quarters of it. The ring crosses each uplink once each way, at half the
    line: every transfer takes twice its time at the line rate, whichever host's link
    is slow, and a healthy node0 would change nothing. The links' capacity held to
    the hosts' links alone promised half of each transfer back."""
    lag_ms = 0.1 * HEALTHY_MS  # at ranks 0 and 3, either end of node0's link
    job(
        tmp_path,
        hosts=FOUR_HOSTS,
        compute=lambda r, s: COMPUTE_MS,
        transfer=lambda s: 2 * HEALTHY_MS,
        lag=lambda r, s: lag_ms if r in (0, 3) else 0.0,
        nbytes=NBYTES,
        after=AFTER_MS,
    )
    rate = lambda h: RATE_BPS * 3 // 4 if h == "node0" else RATE_BPS  # noqa: E731
    write_links(tmp_path, leaf_spine(FOUR_HOSTS, rate, RATE_BPS // 2), range(0, 10 * 10**9, 10**9))
    analysis = analyze(tmp_path)
    (found,) = [f for f in analysis.findings if f.mode == "slow_link"]
    assert found.nodes == ("node0",), found.summary
    step_ms = COMPUTE_MS + 2 * HEALTHY_MS + lag_ms + AFTER_MS
    # the lag the ranks next to it see, and nothing of the transfer: 29 % before
    assert found.cost == pytest.approx(lag_ms / step_ms, abs=0.01), found.summary
    assert found.severity < Severity.WARNING
