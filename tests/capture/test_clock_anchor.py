"""The wall-clock anchor of a rank's clock survives being descheduled while it is read."""

from __future__ import annotations

from syncpace.capture import clock

WALL_MINUS_MONO = 1_700_000_000_000_000_000


class _Host:
    """Wall and monotonic clocks 100 ns apart per read, one read stalled by 5 ms (the
    process descheduled between two reads, as on a loaded host)."""

    def __init__(self, stall_before_read: int) -> None:
        self.mono, self.reads, self.stall_at = 1_000_000, 0, stall_before_read

    def _tick(self) -> int:
        self.reads += 1
        self.mono += 5_000_000 if self.reads == self.stall_at else 100
        return self.mono

    def monotonic_ns(self) -> int:
        return self._tick()

    def time_ns(self) -> int:
        return self._tick() + WALL_MINUS_MONO


def test_a_stall_between_reads_does_not_shift_the_anchor(monkeypatch):
    for stall in (1, 2, 3):  # before any read of the first bracket
        monkeypatch.setattr(clock, "time", _Host(stall))
        anchor, error = clock.wall_anchor()
        assert abs(anchor - WALL_MINUS_MONO) <= 100 and error == 100


def test_the_clock_keeps_the_anchor_and_its_error(monkeypatch):
    host = _Host(2)  # stalled right after the first wall read
    monkeypatch.setattr(clock, "time", host)
    c = clock.LocalClock(skew_ns=7)
    assert abs(c.base_ns - 7 - WALL_MINUS_MONO) <= 100
    assert c.anchor_error_ns == 100
    assert abs(c.now() - host.mono - WALL_MINUS_MONO - 7) <= 100


def test_another_process_reads_the_clock_the_tracer_reads(monkeypatch):
    """The host sampler runs in a child process and stamps its samples from the clock's
    spec alone: a drifting clock's spec must give the times its ``now()`` gives."""
    mono = iter([1_000, 5_000_000_000])  # the origin, then the read
    monkeypatch.setattr(clock.time, "monotonic_ns", lambda: next(mono))
    monkeypatch.setattr(clock, "wall_anchor", lambda: (7_000_000, 10))
    drifting = clock.local_clock(skew_ns=3, drift_ppm=200.0)
    spec = drifting.spec()
    m = 5_000_000_000
    expected = m + spec["base_ns"] + int((m - spec["origin_ns"]) * spec["rate"])
    assert drifting.now() == expected == m + 7_000_003 + int((m - 1_000) * 200e-6)
    plain = clock.local_clock(skew_ns=3).spec()
    assert plain == {"base_ns": 7_000_003, "origin_ns": 0, "rate": 0.0}
