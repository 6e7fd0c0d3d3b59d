"""A host link slower than its peers' named from the link counters alone.

Built jobs (``tests/analysis/test_mechanisms.job``): six ranks on three hosts, one
all-reduce a step whose transfer takes as long as the slowest host link needs for its
bytes; every rank sees it end at the same time, so no rank lags. The truth is the rate
each host link was set to and the bytes each carries (the counters are written from
them): the job's own bytes alone, or others' beside them on the slow link.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tests.analysis.test_mechanisms import job
from tests.linkcounters import Direction, star, write_links

from syncpace.analysis import Severity, analyze

MS = 1_000_000
HOSTS = ["h0", "h0", "h1", "h1", "h2", "h2"]
NODES = ("h0", "h1", "h2")
NBYTES = 2 << 20
PEER_BPS = 5_000_000_000
SLOW = 4  # h0's link at a quarter of its peers' rate
COMPUTE_MS, AFTER_MS, STEPS = 40.0, 1.0, 40


def _per_host(ranks: int) -> float:
    """The bytes of one step's all-reduce over each host's link: round a ring of
    ``ranks``, those of a host in a row, one edge leaves each host and one enters, and
    each carries 2(n-1)/n of the bytes with n the ranks."""
    return NBYTES * 2 * (ranks - 1) / ranks


def _at(rate_bps: float, ranks: int = len(HOSTS)) -> float:
    """One step's bytes over a host link at ``rate_bps``, in ms."""
    return _per_host(ranks) * 8 / rate_bps * 1e3


def _run(
    root: Path, rate: Callable[[str], int], foreign_bps: float = 0.0, hosts: list[str] = HOSTS
) -> Path:
    """The job (ranks on ``hosts``), its transfers as long as the slowest link makes
    them, and counters whose every host link carries the job's bytes at the pace of a
    step (and, on h0's link, ``foreign_bps`` of others' traffic)."""
    transfer = _at(min(rate(h) for h in NODES), len(hosts))
    job(
        root,
        hosts=hosts,
        steps=STEPS,
        compute=lambda r, s: COMPUTE_MS,
        transfer=lambda s: transfer,
        nbytes=NBYTES,
        after=AFTER_MS,
    )
    step_ns = (COMPUTE_MS + transfer + AFTER_MS) * MS

    def carried(d: Direction, t: int) -> int:
        other = foreign_bps / 8 * t / 1e9 if "h0" in (d[1], d[2]) else 0.0
        return int(_per_host(len(hosts)) * t / step_ns + other)

    end = int(STEPS * step_ns) + 10**9
    write_links(root, star(NODES, rate), range(0, end, 10**8), carried)
    return root


def _slow_link(path: Path):
    return [f for f in analyze(path).findings if f.mode == "slow_link"]


def test_a_slow_host_link_no_rank_lags_behind_is_named_from_the_counters(tmp_path: Path) -> None:
    """h0's link at a quarter of its peers' rate: every transfer takes four times as
    long at every rank. The finding names h0 and its ranks, with the rates and how
    busy each link was, and costs the transfers at the peers' rate: 16 ms become 4."""
    path = _run(tmp_path, lambda h: PEER_BPS // SLOW if h == "h0" else PEER_BPS)
    (found,) = _slow_link(path)
    assert found.nodes == ("h0",) and found.ranks == (0, 1)
    assert found.evidence["from_counters"] is True
    assert found.evidence["lagging_ranks"] == []
    assert found.evidence["slow_host_links_bps"] == {"h0": PEER_BPS // SLOW}
    busy = found.evidence["host_link_utilisation"]
    # the same bytes each step on every link: a quarter of the rate is four times as busy
    assert busy["h0"] == pytest.approx(SLOW * busy["h1"], rel=0.02)
    assert busy["h1"] == pytest.approx(busy["h2"], rel=0.02)
    assert found.evidence["baseline"]["source"] == "the hosts' link rate"
    assert found.evidence["baseline"]["gbps"] == pytest.approx(PEER_BPS / 8e9)
    slow_ms = COMPUTE_MS + _at(PEER_BPS // SLOW) + AFTER_MS
    healthy_ms = COMPUTE_MS + _at(PEER_BPS) + AFTER_MS
    assert found.cost == pytest.approx(1 - healthy_ms / slow_ms, abs=0.01)
    # the bytes' own time at the peers' rate is bandwidth's, the rest the link's: each
    # claimed once
    (bandwidth,) = [f for f in analyze(path).findings if f.mode == "bandwidth_bound"]
    assert bandwidth.cost == pytest.approx(_at(PEER_BPS) / slow_ms, abs=0.01)
    assert found.severity == Severity.CRITICAL
    assert found.summary.startswith("host link of h0 set to 1.25 Gbit/s")
    assert "the other hosts' links at 5 Gbit/s" in found.summary
    assert "every rank waits alike; ranks 0, 1 (h0) behind it" in found.summary
    assert "at the hosts' link rate, 5 Gbit/s" in found.summary


def test_links_slow_on_every_host_alike_name_no_host(tmp_path: Path) -> None:
    """Every host link at the same low rate: none is slower than its peers."""
    path = _run(tmp_path, lambda h: PEER_BPS // SLOW)
    assert [f.nodes for f in _slow_link(path) if f.nodes != NODES] == []


def test_others_traffic_on_the_slow_link_is_not_the_link_named_slow(tmp_path: Path) -> None:
    """h0's link also carries others' bytes (half its rate) beside the job's: that is
    contention (foreign bytes in the counters), never a slow link of h0's. One rank a
    host, so that the job's bytes on each link are what the analysis bounds them by."""
    slow = PEER_BPS // SLOW
    rate = lambda h: slow if h == "h0" else PEER_BPS  # noqa: E731
    alone = _run(tmp_path / "alone", rate, hosts=list(NODES))
    assert [f.nodes for f in _slow_link(alone)] == [("h0",)]
    beside = _run(tmp_path / "beside", rate, foreign_bps=slow / 2, hosts=list(NODES))
    found = analyze(beside).findings
    assert [f.nodes for f in found if f.mode == "slow_link"] == []
    assert found[0].mode == "fabric_contention"
    assert found[0].summary.startswith("h0 sends at 80% of host link h0→sw")


def _nic_counters(root: Path, slow_until: int) -> None:
    """Each host's eth0 over the run and a second after it: the job's bytes at the pace
    of a step, h0's NIC declaring its peers' rate before and after the run and a
    quarter of it until ``slow_until`` (ns; the fault that set it)."""
    from syncpace.trace.hostwriter import CountersWriter, host_paths, write_host_meta

    step_ns = (COMPUTE_MS + _at(PEER_BPS // SLOW) + AFTER_MS) * MS
    series = [("nic", "eth0", -1, c) for c in ("rx_bytes", "tx_bytes", "link_rate_bps")]
    for host in NODES:
        meta, counters = host_paths(root, host)
        write_host_meta(meta, {"host": host})
        w = CountersWriter(counters, host)
        for t in range(0, int(STEPS * step_ns) + 10**9, 50 * MS):
            moved = int(_per_host(len(HOSTS)) * min(t, STEPS * step_ns) / step_ns)
            slow = host == "h0" and 0 < t <= slow_until
            w.write([t] * 3, [0, 1, 2], [moved, moved, PEER_BPS // (SLOW if slow else 1)], series)
        w.close()


def test_a_nic_set_slower_for_the_run_carries_no_other_traffic(tmp_path: Path) -> None:
    """h0's NIC declares a quarter of its peers' rate while the job runs and its
    peers' rate after (the fault lifted): its bytes are the job's alone, read as
    counted, not as its utilisation times the rate it declared last (four times them:
    other traffic, and the slow link never named)."""
    path = _run(tmp_path, lambda h: PEER_BPS // SLOW if h == "h0" else PEER_BPS)
    _nic_counters(path, slow_until=int(STEPS * (COMPUTE_MS + _at(PEER_BPS // SLOW) + 1) * MS))
    analysis = analyze(path)
    assert analysis.runs[0].hosts is not None
    assert [f.mode for f in analysis.findings if f.mode == "fabric_contention"] == []
    (found,) = [f for f in analysis.findings if f.mode == "slow_link"]
    assert found.nodes == ("h0",) and found.evidence["from_counters"] is True
