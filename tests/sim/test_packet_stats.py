"""The packet driver's statistics (``PacketNetwork.statistics``): what TCP did in a run,
checked on built scenarios whose answer is known without ns-3: a clean transfer
repairs nothing; an incast's drops are all at the receiver's port and every dropped
segment is sent again; a connection whose ACKs cross a greedy flow's full queue has
that queue in its round trip, one whose path avoids it does not.
"""

from __future__ import annotations

import pytest

from syncpace.sim.packet.fabric import queue_bytes
from syncpace.sim.packet.net import HEADERS
from syncpace.sim.packet.transfers import Transfers

from .test_packet import needs_ns3, star

pytestmark = [needs_ns3, pytest.mark.slow]
SEGMENT = 1500 - HEADERS


def direction(net, frm: int, to: int) -> int:
    """The statistics' index of link direction ``frm -> to``."""
    for i, (a, b, _, _) in enumerate(net.fabric.links):
        if (a, b) == (frm, to):
            return 2 * i
        if (b, a) == (frm, to):
            return 2 * i + 1
    raise AssertionError(f"no link {frm} -> {to}")


def test_a_clean_transfer_repairs_nothing_and_its_follower_starts_at_its_end() -> None:
    net = star(2, 200.0)
    out = Transfers()
    c = out.conn(0, 1, 0)
    first = out.add(c, 1 << 20, 0.0, [])
    second = out.add(c, 64 << 10, 0.003, [first])
    r = net.statistics(out)
    assert r["drops"] == 0
    assert r["start"][first] == pytest.approx(0.0, abs=1e-9)
    # a transfer goes DELAY after its dependency ended, as the description says
    assert r["start"][second] == pytest.approx(r["done"][first] + 0.003, abs=1e-9)
    retx, rto, recoveries, cwnd, _, _ = r["conns"][c]
    assert (retx, rto, recoveries) == (0, 0, 0)
    # slow start grew the window past its initial 10 segments over a 1 MiB transfer
    assert cwnd > 10 * SEGMENT
    assert all(drops == 0 for drops, _ in r["dirs"])


def test_an_incasts_drops_are_at_the_receivers_port_and_each_is_sent_again() -> None:
    mbit, ranks = 20.0, 8
    # seven first windows of 10 segments into one port at its own rate against a FIFO
    # of 1 ms of it plus the 15 kB bucket (test_packet's incast): drops are certain
    net = star(ranks, mbit, packet_queue_ms=1.0)
    out = Transfers()
    conns = [out.conn(src, 0, 0) for src in range(1, ranks)]
    for c in conns:
        out.add(c, 64 << 10, 0.0, [])
    r = net.statistics(out)
    switch = net.fabric.links[0][1]  # rank 0's link: rank 0 to the switch
    port = direction(net, switch, 0)
    assert r["drops"] > 0
    assert r["dirs"][port][0] == r["drops"]  # no other direction dropped a packet
    # the port's FIFO filled: its fullest queue is within a segment of its size
    assert r["dirs"][port][1] > queue_bytes(mbit * 1e6, 1.0) - 1500
    # every transfer ended, so every dropped segment was sent again
    assert sum(r["conns"][c][0] for c in conns) >= r["drops"]


def test_a_connection_whose_acks_cross_a_greedy_queue_has_it_in_its_round_trip() -> None:
    """Greedy cubic 1->0 on a 3-host star at 50 Mbit/s fills host 1's up link (its first
    hop): 343,750 B, 55 ms of the rate. Connection 0->1's data path is free (the
    switch's port to host 1 carries nothing else) but its ACKs queue behind the flow's
    data; connection 0->2, run after it, crosses no queue but the few ACKs of its own
    that meet the flow's data on the switch's port to host 0."""
    mbit = 50.0
    net = star(3, mbit, background_flows=("1->0",))
    full_s = queue_bytes(mbit * 1e6, net.spec.packet_queue_ms) * 8 / (mbit * 1e6)

    def transfers() -> Transfers:
        out = Transfers()
        crossing, clear = out.conn(0, 1, 0), out.conn(0, 2, 0)
        a = out.add(crossing, 256 << 10, 0.0, [])
        out.add(clear, 256 << 10, 0.0, [a])  # after a: host 0's up link is its own
        return out

    crossing, clear, a, b = 0, 1, 0, 1
    r = net.statistics(transfers(), warm_s=1.0)
    # the statistics only watch: the same run without them ends every transfer alike
    assert net.transfer_times(transfers(), warm_s=1.0) == r["done"]
    up = direction(net, 1, net.fabric.links[1][1])
    assert r["dirs"][up][1] > 0.9 * queue_bytes(mbit * 1e6, net.spec.packet_queue_ms)
    # a loss-based flow keeps the queue between full and what is left after it backs
    # off (cubic: 0.7 of its window), so every ACK of 0->1 waits at least half of it
    assert r["conns"][crossing][5] > 0.5 * full_s
    assert r["conns"][clear][5] < 0.2 * full_s
    # neither lost a segment: the crossing one is slower only by its window's round trips
    assert r["conns"][crossing][:3] == [0, 0, 0]
    assert r["conns"][clear][:3] == [0, 0, 0]
    wire = (256 << 10) / SEGMENT * 1502 * 8 / (mbit * 1e6)
    assert r["done"][b] - r["start"][b] < 1.2 * wire
    assert r["done"][a] - r["start"][a] > 2 * full_s


def test_hybrid_slow_start_alone_sets_a_lossless_connections_threshold() -> None:
    """Without a loss only cubic's HyStart moves ssthresh from its initial (unbounded)
    value: a transfer whose round trip grows behind the greedy flow's queue leaves slow
    start early with it on, and keeps the initial threshold with it off."""
    net = star(3, 50.0, background_flows=("1->0",))

    def ssthresh(hystart: bool) -> tuple[list[int], int]:
        out = Transfers()
        c = out.conn(0, 1, 0)
        out.add(c, 256 << 10, 0.0, [])
        r = net.statistics(out, warm_s=1.0, hystart=hystart)
        return r["conns"][c][:3], r["conns"][c][4]

    repairs, on = ssthresh(True)
    assert repairs == [0, 0, 0]
    assert on < 256 << 10  # left slow start before the transfer's bytes were in flight
    repairs, off = ssthresh(False)
    assert repairs == [0, 0, 0]
    assert off >= 1 << 31  # ns-3's initial threshold: never lowered


def test_the_same_transfers_run_twice_give_the_same_run() -> None:
    """A fixed-rate flow 2->1 at half the rate beside transfer 0->1: running the same
    transfers again (another offset) must not add the flow a second time, which would
    fill host 1's port and slow the transfer."""
    net = star(3, 50.0, background_flows=("2->1@0.5",))
    out = Transfers()
    out.add(out.conn(0, 1, 0), 256 << 10, 0.0, [])
    first = net.statistics(out, warm_s=0.1)
    assert out.extra == []  # the caller's transfers are left as they were
    assert net.statistics(out, warm_s=0.1)["done"] == first["done"]
