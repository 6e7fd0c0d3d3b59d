"""The stall watchdog on its own: a registry fed by hand, a real thread, real files.

Thresholds are tens of milliseconds; every wait is on a condition (the file on disk, its
state), bounded.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from syncpace.capture.config import TraceConfig
from syncpace.capture.inflight import InFlight
from syncpace.capture.watchdog import StallWatchdog, thread_stacks
from syncpace.errors import ConfigError
from syncpace.trace.stall import load_stalls, read_stall, stall_path

AFTER = 0.05
BOUND = 20.0


class FakeClock:
    def __init__(self) -> None:
        self.ns = 10**12

    def __call__(self) -> int:
        return self.ns


class Work:
    def __init__(self, done: bool = False, broken: bool = False) -> None:
        self.done, self.broken = done, broken

    def is_completed(self) -> bool:
        if self.broken:
            raise RuntimeError("backend cannot say")
        return self.done


def row(seq: int, enter: int, group: str = "0", op: str = "all_reduce") -> tuple:
    return (0, 2, group, 4, seq, op, 4096, "float32", -1, enter)


def done(r: tuple, exit_ns: int, status: str = "completed", error: str | None = None) -> tuple:
    return r + (exit_ns, "wait", status, error, -1)


def make(tmp_path: Path, registry: InFlight, **kw) -> tuple[StallWatchdog, list[int]]:
    flushes: list[int] = []
    now = kw.pop("now", time.monotonic_ns)
    boundary = {"ns": now()}
    dog = StallWatchdog(
        registry,
        now=now,
        offset_ns=lambda: 1000,
        progress=lambda: (2, boundary["ns"]),
        flush=kw.pop("flush", lambda: flushes.append(1)),
        path=stall_path(tmp_path, 0),
        rank=0,
        world_size=4,
        host="h0",
        stall_after_s=kw.pop("after", AFTER),
        stall_repeat_s=kw.pop("repeat", AFTER),
    )
    dog.boundary = boundary  # type: ignore[attr-defined]
    return dog, flushes


def wait_for(predicate, what: str):
    deadline = time.monotonic() + BOUND
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {BOUND}s")
        time.sleep(0.01)


def record(tmp_path: Path, state: str | None = None, updates: int = 0):
    path = stall_path(tmp_path, 0)

    def ready():
        if not path.exists():
            return None
        rec = read_stall(path)
        if (state is None or rec.state == state) and rec.updates >= updates:
            return rec
        return None

    return ready


def test_a_call_in_flight_too_long_is_written_down_with_stacks(tmp_path):
    registry = InFlight()
    stuck = row(7, time.monotonic_ns())
    registry.calls[id(stuck)] = stuck
    previous = row(6, stuck[9] - 10)
    registry.last["0"] = done(previous, stuck[9] - 5)
    dog, flushes = make(tmp_path, registry)
    dog.start()
    try:
        rec = wait_for(record(tmp_path, "stalled"), "stall record")
    finally:
        dog.stop()
    assert (rec.kind, rec.rank, rec.world_size, rec.host) == ("in_collective", 0, 4, "h0")
    (call,) = rec.in_flight
    assert (call.group, call.seq, call.op, call.bytes, call.status) == (
        "0",
        7,
        "all_reduce",
        4096,
        "in_flight",
    )
    assert call.enter_ns == stuck[9] + 1000  # on rank 0's clock
    assert rec.since_ns == call.enter_ns and rec.written_ns - rec.since_ns >= AFTER * 1e9
    assert rec.last_completed["0"].seq == 6 and rec.last_completed["0"].status == "completed"
    assert flushes, "the trace was not flushed before the record"
    main = rec.main_thread
    assert main is not None and main.main
    here = Path(__file__).name
    assert any(f.file.endswith(here) for f in main.frames), "the main thread's stack is missing"
    assert not any(t.name == "syncpace-watchdog" for t in rec.threads)


def test_the_record_is_repeated_while_the_stall_lasts_and_resolved_after(tmp_path):
    clock = FakeClock()
    registry = InFlight()
    stuck = row(3, clock.ns)
    registry.calls[id(stuck)] = stuck
    dog, _ = make(tmp_path, registry, now=clock, after=1.0, repeat=0.5)
    clock.ns += int(0.9e9)
    assert dog.check() is None and not stall_path(tmp_path, 0).exists()  # not yet
    clock.ns += int(0.2e9)
    first = dog.check()
    assert first is not None and first.updates == 1 and first.state == "stalled"
    clock.ns += int(0.2e9)
    assert dog.check() is None  # not due again before stall_repeat_s
    clock.ns += int(0.4e9)
    again = dog.check()
    assert again is not None and again.updates == 2
    assert again.since_ns == first.since_ns and again.detected_ns == first.detected_ns
    assert again.written_ns - first.written_ns == int(0.6e9)
    registry.recorded(stuck, done(stuck, clock.ns))
    resolved = dog.check()
    assert resolved is not None and resolved.state == "resolved"
    assert resolved.kind == "in_collective" and resolved.in_flight == ()
    assert read_stall(stall_path(tmp_path, 0)).state == "resolved"
    assert dog.check() is None  # nothing more to say while the rank progresses


def test_no_progress_without_calls_in_flight_is_a_stall_too(tmp_path):
    registry = InFlight()
    dog, _ = make(tmp_path, registry)
    dog.start()
    try:
        rec = wait_for(record(tmp_path, "stalled"), "no-progress record")
    finally:
        dog.stop()
    assert rec.kind == "no_progress" and rec.in_flight == () and rec.step == 2


def test_a_work_the_backend_completed_is_not_a_stall(tmp_path):
    registry = InFlight()
    finished = row(1, time.monotonic_ns())
    registry.calls[id(finished)] = finished
    registry.works[id(finished)] = Work(done=True)
    dog, _ = make(tmp_path, registry, after=0.05)
    kind, _, live = dog._assess(time.monotonic_ns() + int(1e9))
    assert (kind, live) == ("no_progress", [])  # finished, unobserved: nothing is stuck
    broken = row(2, time.monotonic_ns())
    registry.calls[id(broken)] = broken
    registry.works[id(broken)] = Work(broken=True)  # cannot say: counts as in flight
    kind, since, live = dog._assess(time.monotonic_ns() + int(1e9))
    assert kind == "in_collective" and [r[4] for r in live] == [2]


def test_a_failed_call_is_written_down_at_once_with_the_stacks_of_that_moment(tmp_path):
    registry = InFlight()
    dog, _ = make(tmp_path, registry, after=30.0, repeat=30.0)  # no stall can be due
    dog.start()
    try:
        failing = row(9, time.monotonic_ns())
        registry.calls[id(failing)] = failing
        event = done(failing, time.monotonic_ns(), "timed_out", "RuntimeError: Timed out")
        registry.recorded(failing, event)
        dog.on_failure(event)  # as the tracer calls it, in the failing thread
        rec = wait_for(record(tmp_path, "failed"), "failure record")
    finally:
        dog.stop()
    assert rec.kind == "failed" and rec.failed is not None
    assert (rec.failed.seq, rec.failed.status, rec.failed.error) == (
        9,
        "timed_out",
        "RuntimeError: Timed out",
    )
    assert any(
        f.function == "test_a_failed_call_is_written_down_at_once_with_the_stacks_of_that_moment"
        for f in rec.main_thread.frames
    )


def test_the_watchdog_fails_open(tmp_path, caplog):
    registry = InFlight()
    stuck = row(1, time.monotonic_ns())
    registry.calls[id(stuck)] = stuck

    def broken_flush() -> None:
        raise OSError("disk gone")

    dog, _ = make(tmp_path, registry, flush=broken_flush)
    dog.start()
    try:
        rec = wait_for(record(tmp_path, "stalled"), "record despite the failed flush")
    finally:
        dog.stop()
    assert rec.in_flight[0].seq == 1
    assert "flushing the trace failed" in caplog.text
    # a record that cannot be written stops the thread, never the caller
    dog2, _ = make(tmp_path / "missing" / "dir", registry)
    dog2.start()
    wait_for(lambda: not dog2._thread.is_alive(), "the watchdog to stop on a write error")
    dog2.stop()


def test_thread_stacks_name_every_thread_and_the_main_one():
    started = threading.Event()
    release = threading.Event()

    def parked() -> None:
        started.set()
        release.wait(BOUND)

    t = threading.Thread(target=parked, name="parked-worker")
    t.start()
    started.wait(BOUND)
    try:
        stacks = {s.name: s for s in thread_stacks()}
    finally:
        release.set()
        t.join(BOUND)
    assert stacks["parked-worker"].frames[-1].function in ("wait", "parked")
    assert any(f.function == "parked" for f in stacks["parked-worker"].frames)
    assert [s for s in stacks.values() if s.main][0].name == "MainThread"


def test_records_load_back_and_a_damaged_one_is_named(tmp_path):
    registry = InFlight()
    stuck = row(4, time.monotonic_ns())
    registry.calls[id(stuck)] = stuck
    dog, _ = make(tmp_path, registry)
    wait_for(lambda: dog._assess(time.monotonic_ns()) is not None, "the stall to be due")
    rec = dog.check()
    assert rec is not None
    (tmp_path / "rank-00001.stall.json").write_text("{not json")
    (tmp_path / "rank-00002.stall.json").write_text('{"schema": "syncpace.stall", "version": 9}')
    records, warnings = load_stalls(tmp_path)
    assert list(records) == [0] and records[0].in_flight == rec.in_flight
    assert len(warnings) == 2
    assert any("rank-00001.stall.json: not valid JSON" in w for w in warnings)
    assert any("version 9 is not supported" in w for w in warnings)


@pytest.mark.parametrize("bad", [{"stall_after_s": -1.0}, {"stall_repeat_s": 0.0}])
def test_bad_watchdog_settings_are_refused(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        TraceConfig(**bad)
