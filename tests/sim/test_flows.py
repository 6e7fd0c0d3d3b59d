"""Max-min fairness invariants (property tests) and sharing of an oversubscribed uplink."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.sim.analytical import AnalyticalNetwork
from syncpace.sim.collectives import Phase, Plan
from syncpace.sim.flows import FluidNetwork, link_loads, max_min_rates
from syncpace.sim.network import NetworkSpec
from syncpace.sim.topology import GB, Topology, TopologySpec


@st.composite
def networks(draw):
    links = draw(st.integers(1, 8))
    cap = np.array(draw(st.lists(st.floats(0.5, 100.0), min_size=links, max_size=links)))
    entities = draw(st.integers(1, 10))
    link, ent, weight = [], [], []
    for e in range(entities):
        used = draw(st.lists(st.integers(0, links - 1), min_size=1, max_size=links, unique=True))
        for lk in used:
            link.append(lk)
            ent.append(e)
            weight.append(draw(st.sampled_from([1.0, 1.0, 2.0, 0.5, 3.0])))
    return np.array(link), np.array(ent), np.array(weight), cap, entities


@settings(max_examples=300, deadline=None)
@given(networks())
def test_no_link_above_capacity(net) -> None:
    link, ent, weight, cap, n = net
    rates = max_min_rates(link, ent, weight, cap, n)
    assert np.all(rates > 0)
    assert np.all(link_loads(link, ent, weight, rates, cap.size) <= cap * (1 + 1e-9))


@settings(max_examples=300, deadline=None)
@given(networks())
def test_every_entity_is_bottlenecked(net) -> None:
    """Each entity crosses a full link on which no other entity gets a higher rate."""
    link, ent, weight, cap, n = net
    rates = max_min_rates(link, ent, weight, cap, n)
    load = link_loads(link, ent, weight, rates, cap.size)
    full = load >= cap * (1 - 1e-7)
    for e in range(n):
        mine = link[ent == e]
        assert any(
            full[lk] and rates[e] >= rates[ent[link == lk]].max() * (1 - 1e-7) for lk in mine
        ), f"entity {e} has no bottleneck"


def test_fluid_conserves_bytes_and_reacts_to_arrivals() -> None:
    """A 10-byte/s link: A (30 B) alone for 1 s, then shared with B (10 B) until B ends."""
    fluid = FluidNetwork(np.array([10.0]))
    a = fluid.add(0.0, [0], [1.0], 30.0)
    b = fluid.add(1.0, [0], [1.0], 10.0)
    done = fluid.run_until({a, b})
    assert done[b] == pytest.approx(3.0)  # 10 B at 5 B/s from t=1
    assert done[a] == pytest.approx(4.0)  # 10 + 10 B by t=3, the last 10 B alone
    assert fluid.solves == 3  # re-solved only when a flow starts or ends


def two_flows_one_uplink() -> tuple[Topology, Plan]:
    """Two nodes per leaf, two leaves, one spine, uplink 3x thinner than the leaf's NICs:
    node 0 -> node 2 and node 1 -> node 3 both cross leaf 0's single uplink."""
    topo = Topology(
        TopologySpec(
            kind="leafspine",
            nodes=4,
            gpus_per_node=1,
            nics_per_node=1,
            nic_gbps=30.0,
            nodes_per_leaf=2,
            spines=1,
            oversub=3.0,
        )
    )
    phase = Phase(np.array([0, 1]), np.array([2, 3]), np.full(2, 1e9), np.array([0, 1]), 0, False)
    return topo, Plan("send", "ring", 1_000_000_000, np.arange(4), (phase,))


def test_two_flows_on_an_oversubscribed_uplink_each_get_half() -> None:
    topo, p = two_flows_one_uplink()
    uplink = 2 * 30.0 / 3  # GB/s: the leaf's NICs over the oversubscription
    routes = topo.route(p.phases[0].src, p.phases[0].dst, np.zeros(2, dtype=int))
    link = routes.reshape(-1)
    ent = np.repeat([0, 1], routes.shape[1])
    keep = link >= 0
    rates = max_min_rates(link[keep], ent[keep], np.ones(keep.sum()), topo.capacity, 2)
    assert rates == pytest.approx([uplink / 2 * GB] * 2)
    # both tiers: 1 GB at 10 GB/s each
    spec = NetworkSpec(alpha_us=0.0)
    analytical = AnalyticalNetwork(topo, spec, 1, 0).durations([p])[0, 0]
    assert analytical == pytest.approx(1e9 / (uplink / 2 * GB), rel=1e-9)
    from syncpace.sim.flownet import FlowNetwork

    assert FlowNetwork(topo, spec, 0).run(p, 0.0, 0) == pytest.approx(analytical, rel=1e-9)


def test_ecmp_collision_and_ideal_spreading() -> None:
    """Two flows over two spines: colliding hashes share one uplink, 'ideal' spreads them."""
    base = dict(
        kind="leafspine",
        nodes=4,
        gpus_per_node=1,
        nics_per_node=1,
        nic_gbps=30.0,
        nodes_per_leaf=2,
        spines=2,
        oversub=3.0,
    )
    phase = Phase(np.array([0, 1]), np.array([2, 3]), np.full(2, 1e9), np.array([0, 1]), 0, False)
    p = Plan("send", "ring", 1_000_000_000, np.arange(4), (phase,))
    times = {}
    for ecmp in ("static", "ideal"):
        topo = Topology(TopologySpec(**base, ecmp=ecmp))
        times[ecmp] = AnalyticalNetwork(topo, NetworkSpec(alpha_us=0), 1, 0).durations([p])[0, 0]
    topo = Topology(TopologySpec(**base))
    spines = topo.flow_hash(phase.src, phase.dst) % 2
    per_spine = 2 * 30.0 / 3 / 2  # GB/s
    collide = spines[0] == spines[1]
    assert times["static"] == pytest.approx(1e9 / (per_spine / (2 if collide else 1) * GB))
    assert times["ideal"] == pytest.approx(1e9 / (per_spine * GB))


def test_per_collective_ecmp_rehashes_and_fattree_uses_the_core() -> None:
    """Rehashing per collective changes which flows collide; cross-pod flows in a
    fat-tree pay the core links, and the two tiers agree on an idle fabric."""
    from syncpace.sim.collectives import plan

    spec = dict(
        nodes=8,
        gpus_per_node=1,
        nics_per_node=1,
        nic_gbps=30.0,
        nodes_per_leaf=1,
        spines=2,
        oversub=2.0,
    )
    p = plan("all_reduce", "ring", 64 << 20, np.arange(8), 1)
    busy = {**spec, "nodes_per_leaf": 2}  # several flows per uplink: collisions can vary
    topo = Topology(TopologySpec(kind="leafspine", ecmp="per_collective", **busy))
    a2a = plan("all_to_all", "ring", 64 << 20, np.arange(8), 1)
    times = AnalyticalNetwork(topo, NetworkSpec(), 20, 0).durations([a2a] * 3)
    assert np.unique(times.round(9)).size > 1
    tree = Topology(
        TopologySpec(kind="fattree", leaves_per_pod=2, cores=2, core_oversub=2.0, **spec)
    )
    routes = tree.route(p.phases[0].src, p.phases[0].dst, np.zeros(8, dtype=int))
    assert (routes[:, 6] >= 0).sum() == 4  # 4 pods, ring crosses each pod boundary once
    from syncpace.sim.flownet import FlowNetwork

    analytical = AnalyticalNetwork(tree, NetworkSpec(), 1, 0).durations([p])[0, 0]
    assert FlowNetwork(tree, NetworkSpec(), 0).run(p, 0.0, 0) == pytest.approx(analytical)
