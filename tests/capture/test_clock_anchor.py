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
