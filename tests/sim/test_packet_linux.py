"""The packet tier's TCP and queues as the emulated fabric's Linux hosts have them: the
fabric's tbf shaper (a rested bucket passes at once, the rate holds over time), BBR,
and collectives measured on connections that carried earlier ones.

Truth comes from the fabric's own shaper rules (``syncpace.fabric.plan``) and from the
bytes, frames and rates; the tests that run ns-3 skip without it, as test_packet's do.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from syncpace.errors import ConfigError
from syncpace.fabric.plan import burst_bytes
from syncpace.sim.collectives import plan
from syncpace.sim.network import NetworkSpec
from syncpace.sim.packet.net import HEADERS, PacketNetwork
from syncpace.sim.packet.transfers import Transfers
from syncpace.sim.topology import Topology, TopologySpec

from .test_packet import needs_ns3

MBIT = 50.0
SEGMENT = 1500 - HEADERS  # Linux's MSS on a 1,500-byte MTU with timestamps: 1,448
FRAME = 1500 + 14  # what Linux's tbf counts for a full segment: the Ethernet frame


def star(hosts: int, **network) -> PacketNetwork:
    spec = TopologySpec(
        kind="switch", nodes=hosts, gpus_per_node=1, nics_per_node=1, nic_gbps=MBIT * 1e6 / 8e9
    )
    return PacketNetwork(
        Topology(spec), NetworkSpec(tier="packet", packet_delayed_ack=1, **network), seed=0
    )


def one_transfer(net: PacketNetwork, nbytes: int) -> float:
    out = Transfers()
    out.add(out.conn(0, 1, 0), nbytes, 0.0, [])
    (took,) = net.transfer_times(out)
    return took


def test_tbf_links_carry_the_fabrics_bucket_and_count_its_frames() -> None:
    bps = MBIT * 1e6
    tbf = [ln.split() for ln in star(2, packet_shaper="tbf").fabric.lines() if ln[:4] == "link"]
    wire = [ln.split() for ln in star(2).fabric.lines() if ln[:4] == "link"]
    assert len(tbf) == len(wire) == 2
    for fields in wire:
        assert len(fields) == 6 and float(fields[3]) == bps  # no bucket: the link's rate
    for fields in tbf:
        device, shaped, bucket = float(fields[3]), float(fields[6]), int(fields[7])
        assert bucket == burst_bytes(int(bps)) == 31_250  # 5 ms of 50 Mbit/s
        # a full segment's 1,500 bytes at the shaped rate take as long as its 1,514-byte
        # frame at the fabric's rate
        assert 1500 / shaped == pytest.approx(FRAME / bps, rel=1e-6)
        assert device >= 50 * bps  # the veth: no rate of its own


def test_a_shaper_or_congestion_control_not_modelled_is_refused() -> None:
    with pytest.raises(ConfigError, match="packet_shaper: must be one of wire, tbf, got 'htb'"):
        NetworkSpec(packet_shaper="htb")
    with pytest.raises(ConfigError, match="packet_warm"):
        NetworkSpec(packet_warm=-1)
    assert NetworkSpec(packet_tcp="bbr").packet_tcp == "bbr"


@needs_ns3
@pytest.mark.slow
def test_a_burst_under_the_bucket_passes_at_once_and_a_wire_serialises_it() -> None:
    nbytes = 10 * SEGMENT  # the initial window: sent at once, and under the 31 kB bucket
    wire_s = 10 * (1500 + 2) * 8 / (MBIT * 1e6)  # ten packets at the rate (2: PPP)
    assert one_transfer(star(2), nbytes) > wire_s
    # both buckets are full: the window crosses the two hops at the veth's speed
    assert one_transfer(star(2, packet_shaper="tbf"), nbytes) < wire_s / 10


@needs_ns3
@pytest.mark.slow
@pytest.mark.parametrize("tcp", ["cubic", "bbr"])
def test_through_the_bucket_a_long_transfer_keeps_the_rate(tcp: str) -> None:
    nbytes = 1 << 20
    frames = nbytes + math.ceil(nbytes / SEGMENT) * (FRAME - SEGMENT)
    rate = MBIT * 1e6 / 8
    took = one_transfer(star(2, packet_shaper="tbf", packet_tcp=tcp), nbytes)
    # tbf: by time t a hop has passed at most its bucket plus t of its rate (ns-3's
    # token bucket keeps that to 0.1 %: it passes a few hundred bytes more)
    assert took >= 0.999 * (frames - burst_bytes(int(MBIT * 1e6))) / rate
    # and no slower than the frames at the rate, but for a few round trips of the start
    assert took <= frames / rate + 0.005


@needs_ns3
@pytest.mark.slow
def test_the_measured_collective_is_the_last_after_its_idle_warm_ups() -> None:
    p = plan("all_reduce", "ring", 256 * 1024, np.arange(4), 1)
    # each ring step: 64 KiB through one port, 46 segments at the rate
    wire = 6 * math.ceil(64 * 1024 / SEGMENT) * (1500 + 2) * 8 / (MBIT * 1e6)
    cold = float(star(4, packet_warm=0).durations(p)[0])
    warm = star(4, packet_warm=3)
    warm.idle_s = 0.5
    took = float(warm.durations(p)[0])
    # neither the warm-ups nor the idle before the measured one are counted
    assert wire < took < 1.1 * wire
    assert took == pytest.approx(cold, rel=0.02)


@needs_ns3
@pytest.mark.slow
def test_bbr_paces_up_to_a_fast_links_rate() -> None:
    # ns-3 caps pacing at 4 Gbit/s unless told otherwise; Linux does not
    gbit, nbytes = 10.0, 16 << 20
    spec = TopologySpec(kind="switch", nodes=2, gpus_per_node=1, nics_per_node=1, nic_gbps=gbit / 8)
    net = PacketNetwork(Topology(spec), NetworkSpec(tier="packet", packet_tcp="bbr"), seed=0)
    wire = math.ceil(nbytes / SEGMENT) * (1500 + 2) * 8 / (gbit * 1e9)
    assert wire < one_transfer(net, nbytes) < 1.2 * wire


@needs_ns3
@pytest.mark.slow
def test_a_steps_second_bucket_finds_the_shapers_bucket_drained() -> None:
    p = plan("all_reduce", "ring", 256 * 1024, np.arange(4), 1)
    bucket_s = burst_bytes(int(MBIT * 1e6)) / (MBIT * 1e6 / 8)  # 5 ms of the rate
    net = star(4, packet_shaper="tbf")
    net.idle_s = 0.15
    ((first, second),) = net.sequence([p, p])
    # the first all-reduce starts on rested links, the second right after it: it lacks
    # the bucket's head start
    assert second - first == pytest.approx(bucket_s, abs=0.001)
    # links without a bucket give both the same time
    ((one, two),) = star(4).sequence([p, p])
    assert two == pytest.approx(one, rel=0.01)
