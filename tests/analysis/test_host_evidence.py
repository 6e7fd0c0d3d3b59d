"""Findings carry what the hosts saw: saved scenario traces with host files written by
the real sampler over fake host trees (real sysfs/procfs layout), and the findings'
evidence and summaries naming the host, the NIC path and the GPU state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_nvml import FakeNvml, gpu_states
from syncpace.analysis.api import analyze
from sysfs_trees import (
    JOB_PID,
    sample_host,
    switch_host,
    two_socket_host,
    write_cpu_shares,
    write_netdev,
    write_netstat,
    write_snmp,
)


def _edit_meta(run: Path, rank: int, **fields) -> None:
    path = run / f"rank-{rank:05d}.meta.json"
    meta = json.loads(path.read_text())
    topology = meta.setdefault("topology", {}) or {}
    topology.update(fields.pop("topology", {}))
    meta["topology"] = topology
    meta.update(fields)
    path.write_text(json.dumps(meta))


def _sample(run: Path, host: str, tree, ticks: int, script=None, **kw) -> None:
    sample_host(run, host, tree, ticks, script, **{"job_pid": JOB_PID, **kw})


def test_locality_finding_carries_the_gpu_nic_path_and_numa(fixture_copy, tmp_path):
    run = fixture_copy("locality_variance")  # local rank 2 late on both nodes
    gpus = {0: "0000:1a:00.0", 1: "0000:1b:00.0", 2: "0000:b1:00.0", 3: "0000:3d:00.0"}
    for node in ("node0", "node1"):
        tree = two_socket_host(tmp_path / node)
        write_netdev(tree, {"ib0": {}, "ib1": {}, "ib2": {}, "ib3": {}})
        write_snmp(tree, {})
        write_netstat(tree, {})
        _sample(run, node, tree, 3, use_nvml=False)
    for rank in range(8):
        local = rank % 4
        cpus = list(range(4)) if local == 2 else list(range(6 * local, 6 * local + 6))
        topology = {"cpu_affinity": cpus, "nic_env": {"GLOO_SOCKET_IFNAME": "ib0"}}
        _edit_meta(run, rank, pci_bus_id=gpus[local], topology=topology)
    (finding,) = [f for f in analyze(run).findings if f.mode == "locality_variance"]
    print(finding.summary)
    e = finding.evidence
    assert e["gpu_by_rank"] == {2: "GPU4", 6: "GPU4"}
    assert e["gpu_nic_class_by_rank"] == {2: "SYS", 6: "SYS"}
    assert e["nic_by_rank"][2] == "NIC0 (mlx5_0)"
    assert e["nearest_nic_by_rank"][2] == "NIC2 (mlx5_2)"  # on the GPU's own switch
    assert e["numa_placement_by_rank"] == {2: "remote", 6: "remote"}
    assert e["gpu_numa_node_by_rank"][2] == 1 and e["cpu_numa_nodes_by_rank"][2] == [0]
    assert e["other_ranks_gpu_nic_classes"] == ["NODE", "PIX"]
    assert "ranks 2, 6 reach NIC0 (mlx5_0) across the CPU sockets (SYS)" in finding.summary
    assert "run on CPUs of NUMA node 0, the GPU is on node 1" in finding.summary


def test_straggler_finding_carries_its_gpu_throttling(fixture_copy, tmp_path):
    run = fixture_copy("straggler")  # rank 5 (node1, local rank 1) is late
    buses = ["0000:05:00.0", "0000:06:00.0", "0000:09:00.0", "0000:0a:00.0"]
    for node in ("node0", "node1"):
        tree = switch_host(tmp_path / node)
        write_netdev(tree, {"eth0": {}, "eth1": {}, "eth2": {}})
        write_snmp(tree, {})
        write_netstat(tree, {})
        states = gpu_states()
        if node == "node1":
            states[1].update(sm=1200, reasons=0x4 | 0x1)  # power cap (and idle) all along
        _sample(run, node, tree, 5, nvml_module=FakeNvml({}, states))
    for rank in range(8):
        _edit_meta(run, rank, pci_bus_id=buses[rank % 4])
    (finding,) = [f for f in analyze(run).findings if f.mode == "straggler"]
    print(finding.summary)
    e = finding.evidence
    assert e["gpu_power_capped_share_by_rank"] == {5: 1.0}
    assert e["gpu_sm_clock_mhz_p50_by_rank"] == {5: 1200}
    assert e["other_gpus_sm_clock_mhz_p50"] == 1980
    assert "rank 5's GPU was power-capped 100% of the time" in finding.summary
    assert "SM clock 1200 MHz against 1980 MHz on the others" in finding.summary


def test_a_straggler_on_a_host_starved_of_cpu_says_so_and_costs_its_transfers(
    fixture_copy, tmp_path
):
    """Rank 5 (node1) is late. node1's cgroup holds it at 0.05 CPU, throttled 95 % of
    the time, its sampled rank's threads waiting for a CPU 90 % of the time they could
    run (node0: 5 %). The finding says so, asks for the CPUs first, and its saving
    adds the transfers rank 5 takes part in at the run's best rate."""
    run = fixture_copy("straggler")
    plain = next(f for f in analyze(run).findings if f.mode == "straggler")
    for node, wait, throttled in (("node0", 0.05, 0.0), ("node1", 0.9, 0.95)):
        tree = switch_host(tmp_path / node)
        write_netdev(tree, {"eth0": {}, "eth1": {}, "eth2": {}})
        write_snmp(tree, {})
        write_netstat(tree, {})

        def script(tick, tree=tree, wait=wait, throttled=throttled):
            write_cpu_shares(tree, tick, wait, throttled, quota_us=5_000)

        _sample(run, node, tree, 5, script=script, use_nvml=False)
    finding = next(f for f in analyze(run).findings if f.mode == "straggler")
    print(finding.summary)
    e = finding.evidence
    assert e["cpu_throttled_share_by_host"] == {"node1": pytest.approx(0.95)}
    assert e["cpu_wait_share_by_host"] == {"node1": pytest.approx(0.9)}
    assert e["cpu_quota_by_host"] == {"node1": 0.05}
    assert "host node1's CPU limit (0.05 CPU) held its ranks throttled 95% of" in finding.summary
    assert finding.actions[0].startswith("Give the job's ranks on node1 the CPUs they need")
    assert finding.cost >= plain.cost - 1e-9
    assert "cpu_throttled_share_by_host" not in plain.evidence


def _lossy_node1(run: Path, tmp_path: Path) -> None:
    """Both nodes' samplers: 100 Gbit/s NICs; node1's eth0 sends 99 % of it and
    retransmits 0.5 %, node0's is nearly idle."""
    for node in ("node0", "node1"):
        tree = switch_host(tmp_path / node)
        write_netstat(tree, {})
        lossy = node == "node1"

        def script(tick: int, tree=tree, lossy=lossy) -> None:
            sent = tick * (99_000_000_000 // 8 // 10 if lossy else 1_000_000)
            eth0 = {"tx_bytes": sent, "tx_packets": sent // 9000}
            write_netdev(tree, {"eth0": eth0, "eth1": {}, "eth2": {}})
            retrans = tick * 50 if lossy else 0
            write_snmp(tree, {"OutSegs": tick * 10_000, "RetransSegs": retrans})

        _sample(run, node, tree, 12, script, use_nvml=False)


def test_contention_finding_names_the_lossy_host(fixture_copy, tmp_path):
    run = fixture_copy("fabric_contention")
    _lossy_node1(run, tmp_path)
    analysis = analyze(run)
    (finding,) = [f for f in analysis.findings if f.mode == "fabric_contention"]
    print(finding.summary)
    e = finding.evidence
    assert list(e["tcp_retrans_ratio_by_host"]) == ["node1", "node0"]  # the lossy one first
    assert e["tcp_retrans_ratio_by_host"]["node1"] == pytest.approx(0.005)
    assert e["tcp_retransmitted_segments_by_host"] == {"node1": 550}
    peak = next(iter(e["nic_peak_utilisation_share"].items()))
    assert peak[0] == "node1 eth0 transmit" and peak[1] == pytest.approx(0.99, abs=0.005)
    assert "host node1: TCP retransmitted 0.50% of segments (550, 0 timeouts)" in finding.summary
    assert "host node1 eth0 transmit peaked at 99% of 100 Gbit/s" in finding.summary
    assert "node0" not in finding.summary
    json.dumps(analysis.to_json())  # the metrics' JSON view holds the host numbers
    assert analysis.to_json()["metrics"]["runs"][0]["hosts"]["hosts"]["node1"]["tcp"]


def test_the_source_host_carries_its_counters_beside_the_victims(fixture_copy, tmp_path):
    """A finding placed at its victims (node0's ranks) whose source is another host
    (node1, whose traffic crosses the link) carries the source's counters too: the host
    that retransmits is named even where no rank of it suffers."""
    from dataclasses import replace

    from syncpace.analysis.detectors.hosts import attach_host_evidence

    run = fixture_copy("fabric_contention")
    _lossy_node1(run, tmp_path)
    analysis = analyze(run)
    (found,) = [f for f in analysis.findings if f.mode == "fabric_contention"]
    # the finding itself now names node1 as a source: its NIC sends far beyond the job
    bare = replace(
        found, evidence={}, summary="contention", ranks=(0,), nodes=("node0",), source=()
    )
    placed = replace(bare, source=("node1",))
    run_metrics = analysis.runs[0]
    (without,) = attach_host_evidence([bare], run_metrics, analysis.thresholds)
    (with_source,) = attach_host_evidence([placed], run_metrics, analysis.thresholds)
    assert "node1" not in without.evidence.get("tcp_retransmitted_segments_by_host", {})
    assert with_source.evidence["tcp_retransmitted_segments_by_host"] == {"node1": 550}
    assert "host node1: TCP retransmitted 0.50% of segments" in with_source.summary


def test_without_host_files_findings_are_unchanged(fixture_copy):
    run = fixture_copy("fabric_contention")
    (finding,) = [f for f in analyze(run).findings if f.mode == "fabric_contention"]
    assert "tcp_retrans_ratio_by_host" not in finding.evidence
    assert "host " not in finding.summary


def test_a_healthy_verdict_still_says_a_host_lost_packets(fixture_copy, tmp_path):
    run = fixture_copy("healthy")
    tree = switch_host(tmp_path / "node1")
    write_netstat(tree, {})

    def script(tick: int) -> None:
        eth0 = {"rx_packets": tick * 10_000, "rx_dropped": tick * 20}
        write_netdev(tree, {"eth0": eth0, "eth1": {}, "eth2": {}})
        write_snmp(tree, {})

    _sample(run, "node1", tree, 6, script, use_nvml=False)
    (finding,) = analyze(run).findings
    assert finding.mode == "healthy"
    assert "host node1 eth0 dropped 0.20% of receive packets" in finding.summary
    # 100 dropped of the 50,100 packets that reached the NIC
    assert finding.evidence["nic_dropped_ratio"] == {
        "node1 eth0 receive": pytest.approx(100 / 50_100, abs=1e-6)
    }
