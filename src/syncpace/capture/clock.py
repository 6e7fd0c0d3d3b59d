"""Clock alignment: each rank's offset to rank 0, NTP-style over the job's store.

Protocol for one estimate (a *round*): for ``i`` in ``rounds``, rank ``r`` stamps
``t0``, sets key ``q``; rank 0's server, blocked on ``get(q)``, stamps ``t_srv`` and
sets key ``a`` to it; rank ``r``'s ``get(a)`` returns and it stamps ``t1``. The
round trip with the smallest RTT bounds the error best: offset =
``t_srv - (t0 + t1) / 2`` with uncertainty ``RTT / 2`` (the true offset lies within
that interval whatever the path asymmetry).

The store used here is a dedicated client connection, so a blocking ``get`` never
stalls the training thread's own store traffic.

Failing open without stalling: before its samples, each rank says hello (key
``h``: ``1`` to take part, ``0`` when it cannot trace and leaves). Rank 0 waits for
the hellos of all its peers *together*, for at most half of ``timeout_s``, and then
serves only the ranks present that stay; a rank that never came is dropped for good.
So at attach, rank 0 waits at most ``timeout_s / 2`` once, however many ranks fail,
plus ``rounds`` round trips per traced rank; a rank that cannot write its trace
costs nothing (it leaves at once). Every other wait is bounded by ``timeout_s``
(the first answer of a round by twice that: rank 0 may be serving others first).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

log = logging.getLogger("syncpace")

_PREFIX = "syncpace/clock"


#: Wall-clock reads bracketed by monotonic ones when anchoring (a few µs in all).
ANCHOR_READS = 32


def wall_anchor(reads: int = ANCHOR_READS) -> tuple[int, int]:
    """The wall clock minus ``CLOCK_MONOTONIC`` (ns), and how far it can be off (ns).

    Each wall read is bracketed by two monotonic reads and set against their midpoint;
    the tightest bracket wins. A single pair of reads is off by however long the
    process was descheduled between them: milliseconds on a loaded host, which would
    shift the whole trace against every other wall-clock timeline (the profiler's,
    host telemetry) by as much."""
    best = (0, -1)
    for _ in range(max(reads, 1)):
        before = time.monotonic_ns()
        wall = time.time_ns()
        after = time.monotonic_ns()
        width = after - before
        if best[1] < 0 or width < best[1]:
            best = (wall - (before + after) // 2, width)
    return best[0], (best[1] + 1) // 2


class LocalClock:
    """``CLOCK_MONOTONIC`` anchored once to the wall clock (see :func:`wall_anchor`),
    plus an optional test skew."""

    __slots__ = ("anchor_error_ns", "base_ns")

    def __init__(self, skew_ns: int = 0) -> None:
        anchor, self.anchor_error_ns = wall_anchor()
        self.base_ns = anchor + skew_ns

    def now(self) -> int:
        return time.monotonic_ns() + self.base_ns

    def spec(self) -> dict[str, Any]:
        """What another process needs to read this clock: ``now()`` is
        ``m + base_ns + (m - origin_ns) * rate`` for ``m`` its ``CLOCK_MONOTONIC``."""
        return {"base_ns": self.base_ns, "origin_ns": 0, "rate": 0.0}


class DriftingClock(LocalClock):
    """A clock that runs ``drift_ppm`` fast (slow when negative): what the periodic
    re-estimation exists for, made testable on one machine. The plain clock stays free
    of the extra arithmetic on the hot path."""

    __slots__ = ("_origin_ns", "_rate")

    def __init__(self, skew_ns: int = 0, drift_ppm: float = 0.0) -> None:
        super().__init__(skew_ns)
        self._origin_ns = time.monotonic_ns()
        self._rate = drift_ppm * 1e-6

    def now(self) -> int:
        mono = time.monotonic_ns()
        return mono + self.base_ns + int((mono - self._origin_ns) * self._rate)

    def spec(self) -> dict[str, Any]:
        return {"base_ns": self.base_ns, "origin_ns": self._origin_ns, "rate": self._rate}


def local_clock(skew_ns: int = 0, drift_ppm: float = 0.0) -> LocalClock:
    return DriftingClock(skew_ns, drift_ppm) if drift_ppm else LocalClock(skew_ns)


@dataclass(frozen=True)
class OffsetEstimate:
    """Offset to add to this rank's clock to get rank 0's clock."""

    local_ns: int
    offset_ns: int
    uncertainty_ns: int
    rtt_ns: int

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def best_estimate(samples: Sequence[tuple[int, int, int]]) -> OffsetEstimate:
    """Pick the minimum-RTT sample of ``(t0, t_server, t1)`` triples."""
    if not samples:
        raise ValueError("no clock samples")
    t0, ts, t1 = min(samples, key=lambda s: s[2] - s[0])
    rtt = t1 - t0
    return OffsetEstimate(
        local_ns=(t0 + t1) // 2,
        offset_ns=ts - (t0 + t1) // 2,
        uncertainty_ns=max(rtt // 2, 1),
        rtt_ns=rtt,
    )


#: Rank 0 leaves after the first round (it cannot trace): no periodic rounds.
_SERVER_LEAVES = f"{_PREFIX}/server-leaves"


def _key(round_id: int, rank: int, i: int, side: str) -> str:
    return f"{_PREFIX}/{round_id}/{rank}/{i}/{side}"


def _hello(round_id: int, rank: int) -> str:
    return f"{_PREFIX}/{round_id}/{rank}/h"


def _wait(store: Any, key: str, timeout_s: float) -> None:
    store.wait([key], timedelta(seconds=max(timeout_s, 0.001)))


def client_round(
    store: Any,
    clock: LocalClock,
    rank: int,
    round_id: int,
    rounds: int,
    timeout_s: float = 30.0,
) -> OffsetEstimate:
    """Rank ``rank``'s side of one round (blocking; bounded by ``timeout_s`` a wait)."""
    store.set(_hello(round_id, rank), b"1")
    samples = []
    for i in range(rounds):
        t0 = clock.now()
        store.set(_key(round_id, rank, i, "q"), b"")
        # Rank 0 may first wait for absent ranks and serve the others: more room.
        _wait(store, _key(round_id, rank, i, "a"), timeout_s * (2 if i == 0 else 1))
        t_srv = int(store.get(_key(round_id, rank, i, "a")))
        t1 = clock.now()
        if t_srv < 0:  # rank 0 gave up waiting for this rank's hello: fail now
            raise RuntimeError(f"rank 0 stopped waiting for rank {rank} in round {round_id}")
        samples.append((t0, t_srv, t1))
        store.delete_key(_key(round_id, rank, i, "a"))
    return best_estimate(samples)


def leave(store: Any, rank: int, round_id: int = 0) -> None:
    """This rank cannot trace: tell rank 0 not to wait for it, now or later."""
    if rank == 0:
        store.set(_SERVER_LEAVES, b"1")
    else:
        store.set(_hello(round_id, rank), b"0")


@dataclass(frozen=True)
class Served:
    """What rank 0's side of a round did: whom it served, who failed, who left."""

    served: tuple[int, ...]
    absent: tuple[int, ...]  # no hello within the wait: never attached, dead or hung
    failed: tuple[int, ...]  # said hello, then did not complete its round trips
    left: tuple[int, ...]  # said it cannot trace
    waited_s: float  # time spent waiting for hellos


def serve_round(
    store: Any,
    clock: LocalClock,
    ranks: Sequence[int],
    round_id: int,
    rounds: int,
    timeout_s: float = 30.0,
) -> Served:
    """Rank 0's side: wait for every rank's hello together (at most ``timeout_s / 2``),
    then answer the ranks present, in turn."""
    start = time.monotonic()
    hellos = [_hello(round_id, r) for r in ranks]
    deadline = start + timeout_s / 2
    pause = 0.001
    while hellos and not store.check(hellos) and time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    waited = time.monotonic() - start
    served, absent, failed, left = [], [], [], []
    for rank, hello in zip(ranks, hellos, strict=True):
        if not store.check([hello]):
            absent.append(rank)
            # A rank that comes late reads this instead of waiting for an answer.
            store.set(_key(round_id, rank, 0, "a"), b"-1")
            continue
        if store.get(hello) == b"0":
            left.append(rank)
            continue
        try:
            for i in range(rounds):
                _wait(store, _key(round_id, rank, i, "q"), timeout_s)
                store.set(_key(round_id, rank, i, "a"), str(clock.now()).encode())
                store.delete_key(_key(round_id, rank, i, "q"))
            served.append(rank)
        except Exception as exc:  # a dead or slow rank must not stop the others
            log.warning("syncpace: clock sync with rank %d failed: %s", rank, exc)
            failed.append(rank)
    if absent:
        log.warning(
            "syncpace: clock sync: rank(s) %s did not come within %.1f s; not waited for again",
            ",".join(map(str, absent)),
            timeout_s / 2,
        )
    return Served(tuple(served), tuple(absent), tuple(failed), tuple(left), waited)


class ClockSync:
    """Keeps this rank's offset to rank 0 up to date; never raises into the job."""

    def __init__(
        self,
        store_factory: Callable[[], Any] | None,
        clock: LocalClock,
        rank: int,
        world_size: int,
        *,
        rounds: int,
        interval_s: float,
        on_estimate: Callable[[OffsetEstimate | None, str | None], None],
        timeout_s: float = 30.0,
    ) -> None:
        self._factory = store_factory
        self._clock = clock
        self._rank = rank
        self._world = world_size
        self._rounds = rounds
        self._interval = interval_s
        self._on_estimate = on_estimate
        self._timeout = timeout_s
        self._store: Any = None
        #: Rank 0: what the first round did (who was served, absent, left; the wait).
        self.first_round: Served | None = None
        self._round = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._peers = list(range(1, world_size))

    def initial(self, participate: bool = True) -> None:
        """First estimate, synchronously at attach (every rank takes part).

        A rank that cannot trace passes ``participate=False``: it only tells rank 0
        not to wait for it (rank 0 still answers the others, then stops)."""
        if self._rank == 0 and participate:
            self._on_estimate(OffsetEstimate(self._clock.now(), 0, 0, 0), None)
        if self._world == 1 or self._factory is None:
            if self._factory is None and self._rank != 0 and participate:
                self._on_estimate(None, "no TCPStore to align clocks over")
            return
        try:
            self._store = self._factory()
        except Exception as exc:
            if participate:
                self._fail(f"cannot open a store connection for clock sync: {exc}")
            return
        if not participate:
            try:
                leave(self._store, self._rank)
                if self._rank == 0:  # the others wait for answers: give them
                    self._do_round()
            except Exception as exc:
                log.debug("syncpace: leaving clock sync failed: %s", exc)
            self._stop.set()
            return
        self._do_round()

    def start_periodic(self) -> None:
        if self._interval <= 0 or self._store is None or self._world == 1:
            return
        if self._stop.is_set():
            return
        if self._rank != 0:
            try:  # rank 0 cannot trace and serves no further round
                if self._store.check([_SERVER_LEAVES]):
                    return
            except Exception:
                return
        self._thread = threading.Thread(target=self._loop, name="syncpace-clock", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            if not self._do_round():
                return

    def _do_round(self) -> bool:
        round_id = self._round
        self._round += 1
        try:
            if self._rank == 0:
                served = serve_round(
                    self._store, self._clock, self._peers, round_id, self._rounds, self._timeout
                )
                if self.first_round is None:
                    self.first_round = served
                # Ranks that failed once (dead, hung) or left are not waited for again.
                self._peers = list(served.served)
            else:
                estimate = client_round(
                    self._store, self._clock, self._rank, round_id, self._rounds, self._timeout
                )
                self._on_estimate(estimate, None)
            return True
        except Exception as exc:
            self._fail(f"clock sync round {round_id} failed: {exc}")
            return False

    def _fail(self, reason: str) -> None:
        log.warning("syncpace: %s; keeping the last clock offset", reason)
        self._on_estimate(None, reason)
        self._stop.set()
