"""The host-counters figure: per-NIC utilisation and loss above the iteration times."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from syncpace.analysis.api import analyze
from syncpace.report.figures import all_figures, host_nic_counters
from syncpace.telemetry.sampler import HostSampler
from sysfs_trees import switch_host, write_netdev, write_netstat, write_snmp

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def run(tmp_path):
    """The saved contention scenario with one host whose eth0 runs at 80 % of its
    100 Gbit/s for a second, then drops packets and retransmits."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "fabric_contention", run)
    tree = switch_host(tmp_path / "root")
    write_netstat(tree, {})
    state = {"tx": 0, "drops": 0, "retrans": 0}

    def tick(i: int) -> None:
        state["tx"] += 10_000_000_000 // 8 // 10 * 8  # 80 % of 100 Gbit/s per 100 ms
        if i >= 10:
            state["drops"] += 5
            state["retrans"] += 7
        eth0 = {"tx_bytes": state["tx"], "tx_packets": state["tx"] // 9000}
        eth0["tx_dropped"] = state["drops"]
        write_netdev(tree, {"eth0": eth0, "eth1": {}, "eth2": {}})
        write_snmp(tree, {"OutSegs": i * 1000, "RetransSegs": state["retrans"]})

    clock = SimpleNamespace(t=1_000_000_000)
    tick(0)
    sampler = HostSampler(
        run,
        "node1",
        root=tree.root,
        now=lambda: clock.t,
        use_nvml=False,
        qdisc_dumper=SimpleNamespace(dump=dict, close=lambda: None),
    )
    for i in range(20):
        tick(i)
        sampler.step(slow=True)
        clock.t += 100_000_000
    sampler.close()
    return run


def test_the_figure_draws_utilisation_loss_and_iterations(run):
    analysis = analyze(run)
    fig = host_nic_counters(analysis, analysis.runs[0])
    names = [t.name for t in fig.data]
    assert "node1 eth0 tx" in names and "iteration time (ms)" in names
    tx = next(t for t in fig.data if t.name == "node1 eth0 tx")
    assert np.nanmax(np.array(tx.y, dtype=float)) == pytest.approx(0.8, abs=0.01)
    drops = next(t for t in fig.data if t.name == "drops node1 eth0 tx")
    assert sum(drops.y) == 5 * 10  # ticks 10..19
    retrans = next(t for t in fig.data if t.name == "TCP retransmits node1")
    assert sum(retrans.y) == pytest.approx(7 * 10)
    titles = [title for title, _ in all_figures(analysis)[0]]
    assert any(t.startswith("Host NIC counters") for t in titles)


def test_no_host_files_no_figure():
    analysis = analyze(DATA / "fabric_contention")
    assert host_nic_counters(analysis, analysis.runs[0]) is None


def test_one_analysis_draws_its_lines_in_one_order(run):
    """Two hosts whose counters tie (the same windows, the same peaks) are drawn in name
    order however their rows come: the page of one analysis is one page."""
    analysis = analyze(run)
    metrics = analysis.runs[0]
    windows = metrics.hosts.windows
    both = pl.concat([windows, windows.with_columns(host=pl.lit("node0"))])

    def names(seed: int) -> list[str]:
        shuffled = both.sample(fraction=1.0, shuffle=True, seed=seed)
        hosts = dataclasses.replace(metrics.hosts, windows=shuffled)
        fig = host_nic_counters(analysis, dataclasses.replace(metrics, hosts=hosts))
        return [t.name for t in fig.data]

    first = names(0)
    assert [n for n in first if n.startswith("TCP")] == [
        "TCP retransmits node0",
        "TCP retransmits node1",
    ]
    assert first.index("node0 eth0 tx") < first.index("node1 eth0 tx")
    assert all(names(seed) == first for seed in range(1, 6))
