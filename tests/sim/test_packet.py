"""The packet tier (``--tier packet``): TCP through ns-3 against first principles, against
the flow tier where the two must agree, and its one-line refusals.

The tests that run ns-3 skip where the ``ns3`` package or g++ is missing (CI installs
both); the first of them compiles the driver (seconds) into the user's cache.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from importlib.machinery import ModuleSpec
from pathlib import Path

import numpy as np
import pytest

from syncpace.cli.main import main
from syncpace.errors import ConfigError
from syncpace.fabric.plan import burst_bytes, tbf_args
from syncpace.sim import engine
from syncpace.sim.collectives import plan
from syncpace.sim.flownet import FlowNetwork
from syncpace.sim.network import NetworkSpec
from syncpace.sim.packet import build
from syncpace.sim.packet.fabric import queue_bytes
from syncpace.sim.packet.net import HEADERS, PacketNetwork, forget
from syncpace.sim.packet.transfers import Transfers, expand, one_node
from syncpace.sim.topology import Topology, TopologySpec

from .conftest import config

MIB = 1 << 20
PPP = 2  # bytes ns-3's point-to-point device adds to every packet


def _has_ns3() -> bool:
    try:
        build.ns3_root()
    except ConfigError:
        return False
    return shutil.which("g++") is not None


needs_ns3 = pytest.mark.skipif(not _has_ns3(), reason="needs the ns3 package and g++")


def star(hosts: int, mbit: float, **network) -> PacketNetwork:
    """``hosts`` one-GPU nodes on one switch at ``mbit`` Mbit/s each way."""
    spec = TopologySpec(
        kind="switch", nodes=hosts, gpus_per_node=1, nics_per_node=1, nic_gbps=mbit * 1e6 / 8e9
    )
    return PacketNetwork(Topology(spec), NetworkSpec(tier="packet", **network), seed=0)


def wire_s(nbytes: float, mbit: float, mtu: int = 1500) -> float:
    """Time the bytes take on the wire: whole segments, each with its headers."""
    segment = mtu - HEADERS
    return math.ceil(nbytes / segment) * (mtu + PPP) * 8 / (mbit * 1e6)


def test_queues_are_sized_as_the_fabric_sizes_its_shaper() -> None:
    for rate in (1_000_000, 50_000_000, 200_000_000, 10_000_000_000):
        assert queue_bytes(rate, 0.0) == burst_bytes(rate)
        args = tbf_args(rate, 50.0)
        assert args[args.index("latency") + 1] == "50ms"
        assert queue_bytes(rate, 50.0) == int(rate / 8 * 0.05) + burst_bytes(rate)


@needs_ns3
@pytest.mark.slow
def test_one_transfer_takes_its_wire_time_plus_slow_start() -> None:
    mbit, nbytes = 200.0, MIB
    net = star(2, mbit)
    out = Transfers()
    out.add(out.conn(0, 1, 0), nbytes, 0.0, [])
    (took,) = net.transfer_times(out)
    wire = wire_s(nbytes, mbit)
    # a packet's round trip: four serialisations at most (data both hops, ACK both hops)
    # and four 1 us links; slow start from 10 segments doubles once per round trip
    rtt = 4 * (1500 + PPP) * 8 / (mbit * 1e6) + 4e-6
    rounds = math.ceil(math.log2(nbytes / (10 * (1500 - HEADERS)) + 1))
    assert wire < took <= wire + (rounds + 2) * rtt
    assert net.drops == 0


@needs_ns3
@pytest.mark.slow
def test_two_flows_into_one_port_share_it_about_evenly() -> None:
    mbit, nbytes = 200.0, 2 * MIB
    net = star(3, mbit)
    out = Transfers()
    for src in (1, 2):
        out.add(out.conn(src, 0, 0), nbytes, 0.0, [])
    first, second = sorted(net.transfer_times(out))
    both = wire_s(2 * nbytes, mbit)
    # the receiver's port carries both: the last ends when it has carried them all
    assert both < second < 1.05 * both
    # at half the port each, the first ends close to the second (not after half the time)
    assert first > 0.85 * second


@needs_ns3
@pytest.mark.slow
def test_an_uncontended_ring_matches_the_flow_tier() -> None:
    mbit, ranks = 50.0, 4
    net = star(ranks, mbit, algorithm="ring", alpha_us=0.0)
    p = plan("all_reduce", "ring", 256 * 1024, np.arange(ranks), 1)
    packet = float(net.durations(p)[0])
    flow = FlowNetwork(net.topo, net.spec, seed=0).run(p, 0.0, 0)
    assert flow == pytest.approx(2 * (ranks - 1) / ranks * 256 * 1024 * 8 / (mbit * 1e6))
    # TCP pays its headers (1502 bytes on the wire per 1448) and a round trip per ring
    # step that the fluid model does not: the packet tier is slower, within 10 %
    assert flow * (1500 + PPP) / (1500 - HEADERS) < packet < 1.10 * flow
    assert net.drops == 0


@needs_ns3
@pytest.mark.slow
def test_incast_drops_packets_that_the_fluid_model_never_loses() -> None:
    mbit, ranks, nbytes = 20.0, 8, 64 * 1024
    # 7 senders at the port's own rate each send a first window of 10 segments at once:
    # while 70 packets arrive the port sends 10, a backlog of 60 (87 KB) against a FIFO
    # of 1 ms of the rate plus the 15 KB bucket: drops are certain
    net = star(ranks, mbit, algorithm="ring", packet_queue_ms=1.0)
    assert queue_bytes(mbit * 1e6, 1.0) < 60 * 1448
    out = Transfers()
    for src in range(1, ranks):
        out.add(out.conn(src, 0, 0), nbytes, 0.0, [])
    ends = net.transfer_times(out)
    assert net.drops > 0
    assert max(ends) > wire_s(7 * nbytes, mbit)


@needs_ns3
@pytest.mark.slow
def test_the_engine_takes_each_collectives_time_from_ns3() -> None:
    cfg = config(
        network={"tier": "packet", "algorithm": "ring"},
        workload={"model_mb": 8.0, "bucket_mb": 4.0},
        run={"steps": 12, "warmup": 2},
    )
    res = engine.simulate(cfg)
    # the engine warms each plan's connections after a step's compute, as a job's rest
    idle = cfg.workload.compute_s + cfg.workload.opt_ms * 1e-3
    net = PacketNetwork(res.topology, cfg.network, cfg.run.seed, idle_s=idle)
    world = np.arange(cfg.topology.world_size)
    # the step's buckets one after the other, as the step runs them
    wanted = net.sequence([plan("all_reduce", "ring", int(b), world, 4) for b in res.bucket_bytes])
    assert np.allclose(res.comm_s, wanted, rtol=1e-9)


@needs_ns3
@pytest.mark.slow
def test_simulate_packet_writes_a_trace(tmp_path: Path, capsys) -> None:
    out = tmp_path / "t"
    code = main(
        [
            "simulate",
            "--tier",
            "packet",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--steps",
            "10",
            "--set",
            "workload.model_mb=4",
            "--set",
            "workload.bucket_mb=2",
            "--out",
            str(out),
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    payload = json.loads(captured.out)
    assert payload["summary"]["world_size"] == 4
    assert payload["summary"]["comm_ms"] > 0
    assert (out / "rank-00003.meta.json").exists()


@pytest.mark.parametrize("missing", ["ns3", "g++"])
def test_without_ns3_or_a_compiler_one_line_and_exit_2(monkeypatch, capsys, missing) -> None:
    if missing == "ns3":
        monkeypatch.setattr(build, "find_spec", lambda name: None)
    else:
        monkeypatch.setattr(build.shutil, "which", lambda name: None)
        monkeypatch.setattr(build, "ns3_root", lambda: Path("/nonexistent"))
    code = main(["simulate", "--tier", "packet", "--nodes", "2", "--steps", "5"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    wanted = "pip install 'syncpace[packet]'" if missing == "ns3" else "install it"
    assert wanted in err


def test_a_package_without_the_libraries_is_named(monkeypatch, tmp_path: Path) -> None:
    (tmp_path / "ns3").mkdir()
    spec = ModuleSpec("ns3", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path / "ns3")]
    monkeypatch.setattr(build, "find_spec", lambda name: spec)
    with pytest.raises(ConfigError, match=r"ns3 package at .*ns3 lacks ns-3 3\.44"):
        build.ns3_root()


@needs_ns3
@pytest.mark.slow
def test_a_flow_crosses_the_spine_its_address_names() -> None:
    # two leaves of two hosts, two spines, each uplink half a host link (1:2)
    mbit, nbytes = 100.0, MIB
    spec = TopologySpec(
        kind="leaf-spine",
        nodes=4,
        gpus_per_node=1,
        nics_per_node=1,
        nodes_per_leaf=2,
        spines=2,
        oversub=2.0,
        nic_gbps=mbit * 1e6 / 8e9,
    )
    net = PacketNetwork(Topology(spec), NetworkSpec(tier="packet"), seed=0)

    def last_end(spines: tuple[int, int]) -> float:
        out = Transfers()
        for (src, dst), spine in zip(((0, 2), (1, 3)), spines, strict=True):
            out.add(out.conn(src, dst, spine), nbytes, 0.0, [])
        return max(net.transfer_times(out))

    apart, together = last_end((0, 1)), last_end((1, 1))
    uplink = mbit / 2
    # apart: each flow alone on a half-rate uplink; together: both on one
    assert wire_s(nbytes, uplink) < apart < 1.1 * wire_s(nbytes, uplink)
    assert wire_s(2 * nbytes, uplink) < together < 1.1 * wire_s(2 * nbytes, uplink)


def _hier_net(**network) -> PacketNetwork:
    """2 nodes of 4 GPUs on a 2-spine leaf-spine, GPU 3 far from its NIC."""
    spec = TopologySpec(
        kind="leaf-spine",
        nodes=2,
        gpus_per_node=4,
        nics_per_node=2,
        nic_gbps=0.125,
        intra_gbps=0.5,
        nodes_per_leaf=1,
        spines=2,
        far_gpus=(3,),
    )
    net = NetworkSpec(tier="packet", algorithm="hierarchical", **network)
    return PacketNetwork(Topology(spec), net, seed=0)


def test_only_node_symmetric_intra_node_phases_shrink_to_one_node() -> None:
    p = plan("all_reduce", "hierarchical", 4 * MIB, np.arange(8), 4)
    intra_rs, inter, intra_ag = p.phases
    small = one_node(intra_rs, 4)
    assert sorted(small.src.tolist()) == [0, 1, 2, 3]
    assert np.array_equal(np.sort(small.dst), np.arange(4))
    assert small.nbytes.tolist() == [3 * MIB] * 4 and small.steps == intra_rs.steps
    assert one_node(intra_ag, 4).src.size == 4
    assert one_node(inter, 4) is inter  # it leaves the nodes
    uneven = dataclasses.replace(intra_rs, nbytes=intra_rs.nbytes * (1 + (intra_rs.src >= 4)))
    assert one_node(uneven, 4) is uneven  # node 1 moves twice the bytes: kept whole


@needs_ns3
@pytest.mark.slow
def test_one_nodes_intra_node_phases_end_when_every_nodes_do() -> None:
    net = _hier_net(background_flows=("1->0",))
    p = plan("all_reduce", "hierarchical", MIB // 4, np.arange(8), 4)
    ends = []
    for every in (True, False):
        out = Transfers()
        expand(p, net.topo, net.spec, 0, out, every_node=every)
        ends.append((len(out.xfers), max(net.transfer_times(out, warm_s=0.05))))
    (whole, whole_end), (small, small_end) = ends
    assert small < whole
    # the same simulation of the phases that leave the nodes, to the nanosecond
    assert small_end == pytest.approx(whole_end, abs=1e-9)


@needs_ns3
def test_an_identical_ns3_run_is_remembered_across_networks() -> None:
    p = plan("all_reduce", "ring", 64 * 1024, np.arange(2), 1)
    first = star(2, 100.0)
    took = first.durations(p)
    again = star(2, 100.0)
    assert again.durations(p).tolist() == took.tolist()
    assert (again.runs, again.executed) == (1, 0)
    forget()
    assert star(2, 100.0).durations(p).tolist() == took.tolist()
