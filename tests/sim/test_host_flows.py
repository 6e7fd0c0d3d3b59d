"""Persistent flows between the job's own nodes (``network.background_flows``), both tiers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from syncpace.errors import ConfigError
from syncpace.sim.analytical import AnalyticalNetwork
from syncpace.sim.collectives import plan
from syncpace.sim.engine import simulate
from syncpace.sim.flownet import FlowNetwork
from syncpace.sim.network import NetworkSpec, host_traffic
from syncpace.sim.scenario import from_dict, load, override
from syncpace.sim.topology import Topology, TopologySpec

from .conftest import config

# 4 nodes x 1 GPU on one switch: the ring 0->1->2->3->0 uses every NIC link once.
SWITCH = dict(kind="switch", nodes=4, gpus_per_node=1, nics_per_node=1)
# 2 leaves of 2 nodes, one spine, oversub 2: a leaf's uplink carries one NIC's rate.
LEAFSPINE = dict(
    kind="leafspine",
    nodes=4,
    gpus_per_node=1,
    nics_per_node=1,
    nodes_per_leaf=2,
    spines=1,
    oversub=2.0,
)
# 4 nodes x 2 GPUs with 2 NICs, flat ring over the 8 ranks: the ring enters a node on
# NIC 0 (local rank 0) and leaves it from NIC 1, so NIC 0's up link carries no ring flow.
RAILS = dict(kind="switch", nodes=4, gpus_per_node=2, nics_per_node=2)


def durations(
    topo_kw: dict, flows: tuple[str, ...], op: str = "all_reduce", standing_queue: bool = False
) -> tuple[float, float]:
    """(analytical, flow-level) seconds of one 64 MiB ``op`` (ring, no α); the bandwidth
    share alone unless ``standing_queue`` (tests/sim/test_standing.py has the queues)."""
    topo = Topology(TopologySpec(**topo_kw))
    p = plan(op, "ring", 64 << 20, np.arange(topo.spec.world_size), topo.spec.gpus_per_node)
    spec = NetworkSpec(
        algorithm="ring", alpha_us=0.0, background_flows=flows, standing_queue=standing_queue
    )
    analytical = AnalyticalNetwork(topo, spec, 1, 0).durations([p])[0, 0]
    return float(analytical), FlowNetwork(topo, spec, 0).run(p, 0.0, 0)


@pytest.mark.parametrize(
    ("topo_kw", "flows", "analytical", "flow"),
    [
        # greedy 1->0 shares node 1's nic_up with ring flow 1->2 and node 0's nic_dn with
        # 3->0: the ring gets half of each in both tiers
        (SWITCH, ("1->0",), 2.0, 2.0),
        # fixed-rate flows leave 1 - F of those two links
        (SWITCH, ("1->0@0.5",), 2.0, 2.0),
        (SWITCH, ("1->0@0.75",), 4.0, 4.0),
        # a greedy and a fixed flow on the same link: half of the quarter left
        (SWITCH, ("1->0", "1->2@0.5"), 4.0, 4.0),
        # ring flow 3->0 shares node 3's nic_up and leaf 1's uplink (one NIC's rate) with
        # both greedy flows: a third in the analytical tier. Max-min gives the same: those
        # two links are the first bottleneck of all three entities, so all freeze at a
        # third together and none has unused share to hand back.
        (LEAFSPINE, ("3->0", "3->1"), 3.0, 3.0),
        # where the tiers differ: three greedy flows out of node 1's NIC 0 (no ring flow
        # there) each reach node 0, 2 and 3's NIC 0, where one ring flow enters. The
        # analytical tier charges the ring half of those links; max-min freezes the greedy
        # flows at a third on their shared source link and hands the ring the other two
        # thirds of the destination links: 1.5x.
        (RAILS, ("1->0", "1->2", "1->3"), 2.0, 1.5),
    ],
)
def test_host_flows_slow_the_ring(topo_kw, flows, analytical, flow) -> None:
    base = durations(topo_kw, ())
    loaded = durations(topo_kw, flows)
    assert loaded[0] / base[0] == pytest.approx(analytical, rel=1e-6)
    assert loaded[1] / base[1] == pytest.approx(flow, rel=1e-6)


@pytest.mark.parametrize("flows", [("3->0",), ("3->0@0.9",), ("3->0", "3->0@0.5")])
def test_a_flow_off_the_collective_leaves_it_unchanged(flows) -> None:
    """A broadcast chain 0->1->2->3 never uses node 3's nic_up nor node 0's nic_dn."""
    base = durations(SWITCH, (), op="broadcast")
    assert durations(SWITCH, flows, op="broadcast") == pytest.approx(base, rel=1e-9)
    # nor the queue a greedy flow keeps in front of node 3's nic_up
    queued = durations(SWITCH, flows, op="broadcast", standing_queue=True)
    assert queued == pytest.approx(base, rel=1e-9)
    assert durations(SWITCH, ("2->3",), op="broadcast")[0] > 1.5 * base[0]  # on the chain: slower


def test_fixed_rate_flows_leave_at_least_five_percent() -> None:
    topo = Topology(TopologySpec(**SWITCH))
    spec = NetworkSpec(background_flows=("1->0@0.75", "1->0@0.75", "2->0@0.5"))
    cap = host_traffic(topo, spec).capacity
    up1, dn0 = topo.base("nic_up") + 1, topo.base("nic_dn")
    assert cap[up1] == pytest.approx(0.05 * topo.capacity[up1])
    assert cap[dn0] == pytest.approx(0.05 * topo.capacity[dn0])
    assert cap[topo.base("nic_up") + 2] == pytest.approx(0.5 * topo.capacity[up1])
    untouched = np.setdiff1d(np.arange(topo.n_links), [up1, dn0, topo.base("nic_up") + 2])
    assert np.array_equal(cap[untouched], topo.capacity[untouched])


def test_routes_start_at_the_first_nic_and_skip_far_links() -> None:
    """Node n's flow leaves from NIC 0 of node n even when local rank 0 is a far GPU."""
    topo = Topology(TopologySpec(**{**RAILS, "far_gpus": (0,)}))
    greedy = host_traffic(topo, NetworkSpec(background_flows=("2->1",))).greedy
    assert [topo.names[lk] for lk in greedy[0]] == ["nic_up[4]", "nic_dn[2]"]


@pytest.mark.parametrize("tier", ["analytical", "flow"])
def test_no_flows_change_nothing(tier: str) -> None:
    """An empty list is the default, bit for bit, with other jobs' traffic and noise on."""
    sections = dict(
        network={"tier": tier, "background_load": 0.2}, noise={"jitter": 0.05}, run={"steps": 12}
    )
    default = simulate(config(**sections))
    sections["network"] = {**sections["network"], "background_flows": []}
    empty = simulate(config(**sections))
    assert np.array_equal(default.comm_s, empty.comm_s)
    assert np.array_equal(default.end_s, empty.end_s)
    topo = default.topology
    assert AnalyticalNetwork(topo, NetworkSpec(), 1, 0).capacity is topo.capacity


@pytest.mark.parametrize("tier", ["analytical", "flow"])
def test_whole_runs_with_greedy_and_other_jobs_traffic(tier: str) -> None:
    """Greedy flows never finish: the flow tier must still end every collective, idle
    gaps included, alongside other jobs' Poisson flows."""
    net = {"tier": tier, "background_load": 0.2, "background_duty": 1.0}
    base = simulate(config(network=net, run={"steps": 8, "warmup": 1})).comm_s
    loaded = simulate(
        config(
            network={**net, "background_flows": ["1->0", "2->3@0.3"]}, run={"steps": 8, "warmup": 1}
        )
    ).comm_s
    assert np.all(np.isfinite(loaded))
    assert loaded.mean() > 1.2 * base.mean()


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("1-0", "expected 'SRC->DST'"),
        ("1->1", "one node"),
        ("1->0@1.5", "in (0, 1)"),
        ("1->0@0", "in (0, 1)"),
        ("1->0@", "expected 'SRC->DST'"),
        ("a->0", "expected 'SRC->DST'"),
        (3, "expected 'SRC->DST'"),
    ],
)
def test_bad_entries_are_named(entry, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        NetworkSpec(background_flows=("0->1", entry))
    assert repr(entry) in str(err.value) and why in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("tier", ["analytical", "flow"])
def test_a_node_outside_the_job_is_named(tier: str) -> None:
    cfg = config(topology={"nodes": 4}, network={"tier": tier, "background_flows": ["9->0"]})
    with pytest.raises(ConfigError, match=r"'9->0'.*node 9 .*4 nodes"):
        simulate(cfg)


def test_lists_and_strings_become_tuples() -> None:
    assert NetworkSpec(background_flows=["1->0", "2->3@0.5"]).background_flows == (
        "1->0",
        "2->3@0.5",
    )
    assert NetworkSpec(background_flows="1->0, 2->3@0.5").background_flows == (
        "1->0",
        "2->3@0.5",
    )
    flows = NetworkSpec(background_flows=(" 1 -> 0 ", "2->3@0.5")).host_flows()
    assert [(f.src, f.dst, f.share) for f in flows] == [(1, 0, None), (2, 3, 0.5)]


def test_round_trips_through_json_and_toml(tmp_path) -> None:
    toml = """
[topology]
kind = "switch"
nodes = 4
gpus_per_node = 1
nics_per_node = 1

[network]
algorithm = "ring"
alpha_us = 0.0
background_flows = ["1->0@0.5"]

[run]
steps = 6
warmup = 1
"""
    path = tmp_path / "flows.toml"
    path.write_text(toml)
    cfg = load(path).config
    assert cfg.network.background_flows == ("1->0@0.5",)
    data = {k: v for k, v in json.loads(json.dumps(cfg.to_json())).items() if v is not None}
    assert data["network"]["background_flows"] == ["1->0@0.5"]
    assert from_dict(data).config.network == cfg.network
    loaded = simulate(cfg).comm_s
    free = simulate(override(cfg, ["network.background_flows=[]"])).comm_s
    assert loaded.mean() / free.mean() == pytest.approx(2.0, rel=0.05)
    again = override(cfg, ['network.background_flows=["1->0@0.75"]'])
    assert again.network.background_flows == ("1->0@0.75",)
