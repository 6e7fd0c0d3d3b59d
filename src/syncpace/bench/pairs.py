"""The pairwise point-to-point matrix: rounds of disjoint pairs, ping-pong latency and
streamed bandwidth per direction, and the pairs that stand out as slow.

Rounds follow the circle method of a round-robin tournament: ``n − 1`` rounds for
even ``n`` (``n`` for odd, one rank sitting out each round), every pair exactly once,
each rank in at most one pair per round, so a rank's link is measured alone.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from syncpace.bench.results import SlowPair, quantile

Pair = tuple[int, int]


def round_robin(n: int) -> list[list[Pair]]:
    """Rounds of disjoint pairs ``(a, b)``, ``a < b``, covering every pair once."""
    if n < 2:
        return []
    players = list(range(n)) + ([None] if n % 2 else [])
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = players[i], players[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


@dataclass(frozen=True, slots=True)
class Direction:
    """What the sending rank measured towards one peer."""

    src: int
    dst: int
    latency_us: float  # half the median round trip of a small message
    bandwidth_gbps: float  # bytes of a stream of large messages / (its time − round trip)


class PairProbe:
    """Measures one ordered pair with blocking send/recv (works on gloo and NCCL)."""

    def __init__(
        self,
        dist: Any,
        torch: Any,
        device: Any,
        message_bytes: int,
        latency_bytes: int,
        iters: int,
        sync_device: Callable[[], None] = lambda: None,
    ) -> None:
        self.dist = dist
        self.small = torch.zeros(latency_bytes, dtype=torch.uint8, device=device)
        self.large = torch.zeros(message_bytes, dtype=torch.uint8, device=device)
        self.iters = iters
        self.sync_device = sync_device

    def _exchange(self, send: Any, peer: int) -> None:
        self.dist.send(send, peer)
        self.dist.recv(self.small, peer)
        self.sync_device()

    def _stream(self, peer: int, count: int) -> None:
        for _ in range(count):
            self.dist.send(self.large, peer)
        self.dist.recv(self.small, peer)  # acknowledged once all arrived
        self.sync_device()

    def initiate(self, me: int, peer: int) -> Direction:
        """Send to ``peer`` (which runs :meth:`respond`) and time it."""
        for _ in range(2):  # warm up the connection both ways
            self._exchange(self.small, peer)
        self._stream(peer, 1)
        rtts = []
        for _ in range(self.iters):
            start = time.perf_counter()
            self._exchange(self.small, peer)
            rtts.append(time.perf_counter() - start)
        rtt = statistics.median(rtts)
        start = time.perf_counter()
        self._stream(peer, self.iters)
        elapsed = time.perf_counter() - start
        # the acknowledgement's round trip is not part of the transfer
        seconds = max(elapsed - rtt, 0.05 * elapsed)
        moved = self.large.numel() * self.iters
        return Direction(me, peer, rtt / 2 * 1e6, moved / seconds / 1e9)

    def respond(self, peer: int) -> None:
        for message in [self.small, self.small, self.large] + [self.small] * self.iters:
            self._answer(message, peer)
        for _ in range(self.iters):
            self.dist.recv(self.large, peer)
        self.dist.send(self.small, peer)
        self.sync_device()

    def _answer(self, message: Any, peer: int) -> None:
        self.dist.recv(message, peer)
        self.dist.send(self.small, peer)
        self.sync_device()

    def measure(self, me: int, a: int, b: int) -> list[Direction]:
        """Both directions of pair ``(a, b)``; ``me`` is one of them."""
        peer = b if me == a else a
        out = []
        for sender in (a, b):
            if sender == me:
                out.append(self.initiate(me, peer))
            else:
                self.respond(peer)
        return out


def matrices(
    n: int, directions: list[Direction]
) -> tuple[list[list[float | None]], list[list[float | None]]]:
    """Latency and bandwidth matrices (``[src][dst]``, diagonal ``None``)."""
    lat: list[list[float | None]] = [[None] * n for _ in range(n)]
    bw: list[list[float | None]] = [[None] * n for _ in range(n)]
    for d in directions:
        lat[d.src][d.dst] = d.latency_us
        bw[d.src][d.dst] = d.bandwidth_gbps
    return lat, bw


#: Quantile of all pair bandwidths that slow pairs are measured against: above the
#: median, so that a fault slowing most pairs (an uplink of a two-leaf fabric carries
#: two thirds of them) still stands out against the pairs it spares.
REFERENCE_QUANTILE = 0.75


def flag_slow(
    bandwidth: list[list[float | None]], fraction: float
) -> tuple[float, float, tuple[SlowPair, ...], tuple[int, ...]]:
    """Median and reference (upper quartile) bandwidth, the pairs below ``fraction`` ×
    the reference (slowest first), and the ranks every one of whose pairs is slow in
    some direction (a slow link at that rank)."""
    n = len(bandwidth)
    values = [
        (i, j, v)
        for i, row in enumerate(bandwidth)
        for j, v in enumerate(row)
        if i != j and v is not None
    ]
    if not values:
        return 0.0, 0.0, (), ()
    ordered = sorted(v for _, _, v in values)
    median = statistics.median(ordered)
    reference = quantile(ordered, REFERENCE_QUANTILE)
    slow = sorted(
        (SlowPair(i, j, v, v / reference) for i, j, v in values if v < fraction * reference),
        key=lambda p: p.bandwidth_gbps,
    )
    flagged = {(p.src, p.dst) for p in slow} | {(p.dst, p.src) for p in slow}
    suspects = tuple(
        r for r in range(n) if n > 2 and all((r, j) in flagged for j in range(n) if j != r)
    )
    return median, reference, tuple(slow), suspects
