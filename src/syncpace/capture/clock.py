"""Clock alignment: each rank's offset to rank 0, NTP-style over the job's store.

Protocol for one estimate (a *round*): for ``i`` in ``rounds``, rank ``r`` stamps
``t0``, sets key ``q``; rank 0's server, blocked on ``get(q)``, stamps ``t_srv`` and
sets key ``a`` to it; rank ``r``'s ``get(a)`` returns and it stamps ``t1``. The
round trip with the smallest RTT bounds the error best: offset =
``t_srv - (t0 + t1) / 2`` with uncertainty ``RTT / 2`` (the true offset lies within
that interval whatever the path asymmetry).

The store used here is a dedicated client connection, so a blocking ``get`` never
stalls the training thread's own store traffic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger("syncpace")

_PREFIX = "syncpace/clock"


class LocalClock:
    """``CLOCK_MONOTONIC`` anchored once to the wall clock, plus an optional test skew."""

    __slots__ = ("base_ns",)

    def __init__(self, skew_ns: int = 0) -> None:
        self.base_ns = time.time_ns() - time.monotonic_ns() + skew_ns

    def now(self) -> int:
        return time.monotonic_ns() + self.base_ns


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


def _key(round_id: int, rank: int, i: int, side: str) -> str:
    return f"{_PREFIX}/{round_id}/{rank}/{i}/{side}"


def client_round(
    store: Any, clock: LocalClock, rank: int, round_id: int, rounds: int
) -> OffsetEstimate:
    """Rank ``rank``'s side of one round (blocking; run off the training thread)."""
    samples = []
    for i in range(rounds):
        t0 = clock.now()
        store.set(_key(round_id, rank, i, "q"), b"")
        t_srv = int(store.get(_key(round_id, rank, i, "a")))
        t1 = clock.now()
        samples.append((t0, t_srv, t1))
        store.delete_key(_key(round_id, rank, i, "a"))
    return best_estimate(samples)


def serve_round(
    store: Any, clock: LocalClock, ranks: Sequence[int], round_id: int, rounds: int
) -> list[int]:
    """Rank 0's side: answer every rank in turn. Returns the ranks that failed."""
    failed = []
    for rank in ranks:
        try:
            for i in range(rounds):
                store.get(_key(round_id, rank, i, "q"))
                store.set(_key(round_id, rank, i, "a"), str(clock.now()).encode())
                store.delete_key(_key(round_id, rank, i, "q"))
        except Exception as exc:  # a dead or slow rank must not stop the others
            log.warning("syncpace: clock sync with rank %d failed: %s", rank, exc)
            failed.append(rank)
    return failed


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
    ) -> None:
        self._factory = store_factory
        self._clock = clock
        self._rank = rank
        self._world = world_size
        self._rounds = rounds
        self._interval = interval_s
        self._on_estimate = on_estimate
        self._store: Any = None
        self._round = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._peers = list(range(1, world_size))

    def initial(self) -> None:
        """First estimate, synchronously at attach (every rank takes part)."""
        if self._rank == 0:
            self._on_estimate(OffsetEstimate(self._clock.now(), 0, 0, 0), None)
        if self._world == 1 or self._factory is None:
            if self._factory is None and self._rank != 0:
                self._on_estimate(None, "no TCPStore to align clocks over")
            return
        try:
            self._store = self._factory()
        except Exception as exc:
            self._fail(f"cannot open a store connection for clock sync: {exc}")
            return
        self._do_round()

    def start_periodic(self) -> None:
        if self._interval <= 0 or self._store is None or self._world == 1:
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
                failed = serve_round(self._store, self._clock, self._peers, round_id, self._rounds)
                # Ranks that failed once (dead, hung) are not waited for again.
                self._peers = [p for p in self._peers if p not in failed]
            else:
                self._on_estimate(
                    client_round(self._store, self._clock, self._rank, round_id, self._rounds), None
                )
            return True
        except Exception as exc:
            self._fail(f"clock sync round {round_id} failed: {exc}")
            return False

    def _fail(self, reason: str) -> None:
        log.warning("syncpace: %s; keeping the last clock offset", reason)
        self._on_estimate(None, reason)
        self._stop.set()
