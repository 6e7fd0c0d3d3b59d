"""Collective costs on an idle uniform fabric match the α–β formulas, in both tiers."""

from __future__ import annotations

import numpy as np
import pytest

from syncpace.sim.analytical import AnalyticalNetwork
from syncpace.sim.collectives import hierarchical_time, ideal_time, plan
from syncpace.sim.flownet import FlowNetwork
from syncpace.sim.network import NetworkSpec
from syncpace.sim.topology import GB, Topology, TopologySpec

MIB = 1 << 20
ALPHA_US = 10.0
NIC = 20.0  # GB/s


def flat(nodes: int) -> Topology:
    """One GPU per node on one switch: every rank has one NIC-limited link."""
    return Topology(
        TopologySpec(kind="switch", nodes=nodes, gpus_per_node=1, nics_per_node=1, nic_gbps=NIC)
    )


def both_tiers(topo: Topology, p, spec: NetworkSpec) -> tuple[float, float]:
    analytical = float(AnalyticalNetwork(topo, spec, 1, 0).durations([p])[0, 0])
    flow = FlowNetwork(topo, spec, 0).run(p, 0.0, salt=0)
    return analytical, flow


@pytest.mark.parametrize("n", [2, 5, 16, 64])
@pytest.mark.parametrize("nbytes", [64 * 1024, 25 * MIB])
def test_ring_all_reduce_matches_formula(n: int, nbytes: int) -> None:
    topo, spec = flat(n), NetworkSpec(algorithm="ring", alpha_us=ALPHA_US)
    expected = 2 * (n - 1) / n * nbytes / (NIC * GB) + 2 * (n - 1) * ALPHA_US * 1e-6
    for got in both_tiers(topo, plan("all_reduce", "ring", nbytes, np.arange(n), 1), spec):
        assert got == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize("n", [3, 8, 32])
def test_reduce_scatter_all_gather_match_formula(op: str, n: int) -> None:
    nbytes = 32 * MIB
    topo, spec = flat(n), NetworkSpec(algorithm="ring", alpha_us=ALPHA_US)
    expected = (n - 1) / n * nbytes / (NIC * GB) + (n - 1) * ALPHA_US * 1e-6
    for got in both_tiers(topo, plan(op, "ring", nbytes, np.arange(n), 1), spec):
        assert got == pytest.approx(expected, rel=0.01)
    assert ideal_time(op, "ring", nbytes, n, ALPHA_US * 1e-6, NIC * GB) == pytest.approx(expected)


@pytest.mark.parametrize(("nodes", "gpus"), [(2, 4), (4, 8), (16, 8)])
def test_hierarchical_matches_formula(nodes: int, gpus: int) -> None:
    nbytes, intra = 100 * MIB, 150.0
    topo = Topology(
        TopologySpec(
            kind="switch",
            nodes=nodes,
            gpus_per_node=gpus,
            nics_per_node=gpus,
            nic_gbps=NIC,
            intra_gbps=intra,
        )
    )
    spec = NetworkSpec(algorithm="hierarchical", alpha_us=ALPHA_US, alpha_intra_us=1.0)
    p = plan("all_reduce", "hierarchical", nbytes, np.arange(nodes * gpus), gpus)
    expected = hierarchical_time(nbytes, nodes, gpus, ALPHA_US * 1e-6, NIC * GB, 1e-6, intra * GB)
    by_hand = (
        2 * ((gpus - 1) * 1e-6 + (gpus - 1) / gpus * nbytes / (intra * GB))
        + 2 * (nodes - 1) * ALPHA_US * 1e-6
        + 2 * (nodes - 1) / nodes * nbytes / gpus / (NIC * GB)
    )
    assert expected == pytest.approx(by_hand)
    for got in both_tiers(topo, p, spec):
        assert got == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("n", [4, 16])
def test_rhd_and_tree_match_their_closed_forms(n: int) -> None:
    nbytes, alpha = 8 * MIB, ALPHA_US * 1e-6
    topo = flat(n)
    for algorithm in ("rhd", "tree"):
        spec = NetworkSpec(algorithm=algorithm, alpha_us=ALPHA_US)
        expected = ideal_time("all_reduce", algorithm, nbytes, n, alpha, NIC * GB)
        for got in both_tiers(topo, plan("all_reduce", algorithm, nbytes, np.arange(n), 1), spec):
            assert got == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("n", [2, 6, 8, 13])
def test_bytes_are_conserved(n: int) -> None:
    s = 12 * MIB
    ranks = np.arange(n)
    sent = {a: plan("all_reduce", a, s, ranks, 1).bytes_sent for a in ("ring", "rhd", "tree")}
    # ring: every rank sends 2(n-1)/n of the buffer
    assert sent["ring"] == pytest.approx(2 * (n - 1) * s)
    # double binary tree: n-1 edges per tree, S/2 up and S/2 down on each, two trees
    assert sent["tree"] == pytest.approx(2 * (n - 1) * s)
    # halving/doubling over the power of two p, plus S folded and unfolded per extra rank
    p = 1 << (n.bit_length() - 1)
    assert sent["rhd"] == pytest.approx(2 * (p - 1) * s + 2 * (n - p) * s)
    assert plan("reduce_scatter", "ring", s, ranks, 1).bytes_sent == pytest.approx((n - 1) * s)
    assert plan("all_to_all", "ring", s, ranks, 1).bytes_sent == pytest.approx((n - 1) * s)
    assert plan("broadcast", "ring", s, ranks, 1).bytes_sent == pytest.approx((n - 1) * s)
    gpus = 2 if n % 2 == 0 else 1
    h = plan("all_reduce", "hierarchical", s, ranks, gpus)
    nodes = n // gpus
    intra = 2 * nodes * gpus * (gpus - 1) / gpus * s
    inter = gpus * nodes * 2 * (nodes - 1) / nodes * s / gpus
    assert h.bytes_sent == pytest.approx(intra + inter)


def test_one_rank_moves_nothing() -> None:
    assert plan("all_reduce", "ring", MIB, np.arange(1), 1).phases == ()
