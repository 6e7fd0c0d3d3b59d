"""A greedy flow's standing queue in the analytical and flow tiers: every ring step that
crosses the link direction it saturates waits the queue's drain time, per hop.

The expected waits are worked out here from the link's rate and the fabric's queue rule
(``tbf rate R burst max(15 kB, 5 ms of R) latency Q``: Q of R plus the bucket), not read
from the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from syncpace.errors import ConfigError
from syncpace.sim.analytical import AnalyticalNetwork
from syncpace.sim.collectives import plan
from syncpace.sim.engine import simulate
from syncpace.sim.flownet import FlowNetwork
from syncpace.sim.network import NetworkSpec
from syncpace.sim.topology import Topology, TopologySpec

from .conftest import config

RATE = 50e6 / 8  # bytes/s: the emulated fabric's 50 Mbit/s links
GBPS = RATE / 1e9  # as TopologySpec counts a NIC
MIB = 1 << 20
STAR = dict(kind="switch", nodes=4, gpus_per_node=1, nics_per_node=1, nic_gbps=GBPS)
# 2 leaves of 2 nodes (0, 1 | 2, 3), one spine, each leaf's uplink one NIC's rate
LEAFSPINE = dict(STAR, kind="leaf-spine", nodes_per_leaf=2, spines=1, oversub=2.0)


def drain_s(rate: float, queue_ms: float) -> float:
    """A full queue of the fabric's tbf at ``rate`` bytes/s, in seconds of that rate."""
    return (queue_ms * 1e-3 * rate + max(15_000, 0.005 * rate)) / rate


def durations(topo_kw: dict, flows: tuple[str, ...], op: str = "all_reduce", **net):
    """(analytical, flow) seconds of one 256 KiB ring ``op`` over every rank, no α."""
    topo = Topology(TopologySpec(**topo_kw))
    p = plan(op, "ring", 256 << 10, np.arange(topo.spec.world_size), 1)
    spec = NetworkSpec(algorithm="ring", alpha_us=0.0, background_flows=flows, **net)
    analytical = float(AnalyticalNetwork(topo, spec, 1, 0).durations([p])[0, 0])
    return analytical, FlowNetwork(topo, spec, 0).run(p, 0.0, 0)


def ring_s(topo_kw: dict, op: str, share: float) -> float:
    """The ring's transfer alone at ``share`` of the NIC rate: (n-1)/n x S per step's
    worth for reduce-scatter, twice that for all-reduce."""
    n, size = topo_kw["nodes"], 256 << 10
    per_flow = (n - 1) / n * size * (2 if op == "all_reduce" else 1)
    return per_flow / (share * topo_kw["nic_gbps"] * 1e9)


@pytest.mark.parametrize(
    ("tcp", "queue_ms", "per_step_s"),
    [
        # loss-based: fills the queue (343,750 B at 50 Mbit/s, below its 6 MiB buffer)
        ("newreno", 50.0, drain_s(RATE, 50.0)),
        ("cubic", 50.0, drain_s(RATE, 50.0)),
        ("cubic", 10.0, drain_s(RATE, 10.0)),
        # bbr: bbr_queue_ms (7 ms) of the link's rate, whatever the queue's size
        ("bbr", 50.0, 0.007),
    ],
)
@pytest.mark.parametrize(("op", "steps"), [("all_reduce", 6), ("reduce_scatter", 3)])
def test_every_ring_step_waits_the_queue_once_per_queued_hop(tcp, queue_ms, per_step_s, op, steps):
    """Greedy h1->h0 on a 4-host star fills h1's up link (its first hop): ring flow 1->2
    crosses that queue on every step, and the flow keeps half of the link (the share
    the tiers gave it before). Nothing else of the ring waits."""
    base = durations(STAR, (), op)
    assert base == pytest.approx((ring_s(STAR, op, 1.0),) * 2, rel=1e-9)
    loaded = durations(STAR, ("1->0",), op, packet_tcp=tcp, packet_queue_ms=queue_ms)
    expected = ring_s(STAR, op, 0.5) + steps * per_step_s
    assert loaded == pytest.approx((expected, expected), rel=1e-6)


def test_the_socket_buffer_bounds_a_loss_based_queue_on_a_fast_link() -> None:
    """At 10 Gbit/s the 50 ms queue holds 62.5 MB; a cubic flow has at most its 6 MiB
    socket buffer in flight, so that is what stands: 5.03 ms per step."""
    fast = dict(STAR, nic_gbps=1.25)
    per_step = 6 * MIB / 1.25e9
    loaded = durations(fast, ("1->0",), packet_tcp="cubic")
    expected = ring_s(fast, "all_reduce", 0.5) + 6 * per_step
    assert loaded == pytest.approx((expected, expected), rel=1e-6)


@pytest.mark.parametrize(
    ("tcp", "per_step_s"), [("cubic", 2 * drain_s(RATE, 50.0)), ("bbr", 0.021)]
)
def test_waits_add_along_a_flow_and_flows_add_in_a_queue(tcp, per_step_s) -> None:
    """On the leaf-spine, greedy 1->0 fills node 1's up link alone, and 3->2 and 0->2
    share node 2's down link (each half of it: neither fills its own up link, nor 0->2
    the uplinks). Ring flow 1->2 crosses both queues: two hops a step. Loss-based flows
    fill each queue (two full queues); bbr keeps 7 ms per flow: 7 + 2 x 7 ms."""
    flows = ("1->0", "3->2", "0->2")
    share, _ = durations(LEAFSPINE, flows, standing_queue=False)
    loaded = durations(LEAFSPINE, flows, packet_tcp=tcp)
    assert loaded == pytest.approx((share + 6 * per_step_s,) * 2, rel=1e-6)


@pytest.mark.parametrize("flows", [("1->0@0.5",), ("1->0@0.9", "2->3@0.3")])
@pytest.mark.parametrize("tcp", ["cubic", "bbr"])
def test_fixed_rate_flows_keep_no_standing_queue(flows, tcp) -> None:
    """A UDP flow below the link rate never fills a queue: the ring keeps exactly the
    share it had (1 - F of the link's rate on the hops the flow crosses)."""
    queued = durations(STAR, flows, packet_tcp=tcp)
    assert queued == durations(STAR, flows, packet_tcp=tcp, standing_queue=False)
    slowest = max(float(f.split("@")[1]) for f in flows if f.startswith("1->"))
    expected = ring_s(STAR, "all_reduce", 1 - slowest)
    assert queued == pytest.approx((expected, expected), rel=1e-9)


def test_standing_queue_off_is_the_share_alone() -> None:
    loaded = durations(STAR, ("1->0",), standing_queue=False)
    assert loaded == pytest.approx((ring_s(STAR, "all_reduce", 0.5),) * 2, rel=1e-9)


@pytest.mark.parametrize("tier", ["analytical", "flow"])
def test_a_whole_run_pays_the_queue_on_every_collective(tier: str) -> None:
    """Through the engine: two 256 KiB buckets an iteration, each a ring all-reduce of
    6 steps behind a full 50 ms queue (bbr: 7 ms a step)."""
    sections = dict(
        topology=dict(STAR),
        workload={"model_mb": 0.5, "bucket_mb": 0.25, "overlap": False},
        noise={"jitter": 0.0},
        run={"steps": 6, "warmup": 1},
    )
    net = {"tier": tier, "algorithm": "ring", "alpha_us": 0.0, "exit_jitter_us": 0.0}
    for tcp, per_step in (("newreno", drain_s(RATE, 50.0)), ("bbr", 0.007)):
        share = simulate(
            config(
                **sections,
                network={**net, "background_flows": ["1->0"], "standing_queue": False},
            )
        ).comm_s
        queued = simulate(
            config(**sections, network={**net, "background_flows": ["1->0"], "packet_tcp": tcp})
        ).comm_s
        assert queued.shape == share.shape
        assert np.allclose(queued - share, 6 * per_step, rtol=1e-6, atol=1e-9)


def test_bbr_queue_ms_has_a_range() -> None:
    with pytest.raises(ConfigError, match="bbr_queue_ms"):
        NetworkSpec(bbr_queue_ms=-1.0)
