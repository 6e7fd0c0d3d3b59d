"""Device times, traced through the tracer's own path on a fake GPU (tests/fakedevice.py).

The fake device's events keep the host time at which its streams reached them: the
truth the traced device times are held to, within the uncertainty the trace states.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import polars as pl
import pytest
import torch

from fakedevice import FakeDevice, FakeNccl
from syncpace.analysis import analyze
from syncpace.capture import tracer as tracer_module
from syncpace.capture.config import TraceConfig
from syncpace.capture.device import use_device
from syncpace.capture.process_group import TracingProcessGroup
from syncpace.capture.tracer import Tracer
from syncpace.trace import RankTraceWriter, load_trace

MS = 1_000_000


class FixedDelays:
    """The pacer's side of the controller: a delay for chosen steps."""

    def __init__(self, delays_s: dict[int, float]) -> None:
        self.delays_s = delays_s

    def delay_for(self, step: int) -> float:
        return self.delays_s.get(step, 0.0)

    def on_step_end(self, *args: object) -> None:
        pass

    def summary(self) -> dict:
        return {}


class Job:
    """One traced rank on a fake GPU: a tracer with its writer, the device, a group."""

    def __init__(self, tmp_path: Path, close_timeout_s: float = 5.0, **device: float) -> None:
        config = TraceConfig(
            dir=str(tmp_path), flush_interval_s=0.05, close_timeout_s=close_timeout_s
        )
        self.tracer = Tracer(config)
        self.tracer.rank = 0
        self.tracer._last_boundary = self.tracer.now()  # what attaching sets
        self.tracer.writer = RankTraceWriter(
            tmp_path, 0, {"world_size": 1, "host": "h"}, journal_slots=4096, flush_interval_s=0.05
        )
        self.device = FakeDevice(host_now=self.tracer.now, **device)
        self.recorded: list = []
        record = self.device.record

        def logged(event):  # every event the tracer records, in order
            self.recorded.append(event)
            record(event)

        self.device.record = logged  # type: ignore[method-assign]
        use_device(self.device)
        self.tracer._start_device_time(self.tracer.writer)
        self.comm = FakeNccl(self.device, solo_ns=MS)
        self.group = TracingProcessGroup(
            self.comm, self.tracer, backend_name="nccl", global_ranks=[0]
        )
        self.dir = tmp_path

    def step(self, compute_ns: int) -> None:
        self.device.launch(compute_ns)
        self.group.allreduce([torch.ones(16)]).wait()
        self.tracer.on_step(manual=True)

    def finish(self) -> pl.DataFrame:
        self.device.synchronize()
        self.tracer.close()
        use_device(None)
        return load_trace(self.dir).events.sort("seq")


@pytest.fixture(autouse=True)
def _no_device_left():
    yield
    use_device(None)


def test_device_times_are_the_devices_within_the_stated_uncertainty(tmp_path):
    job = Job(tmp_path, offset_ns=123_456_789_000, drift_ppm=40.0)
    for _ in range(20):
        job.step(4 * MS)
    events = job.finish()
    meta = load_trace(tmp_path).meta[0]["device_clock"]
    assert meta["source"] == "fake" and meta["resolved"] == 20 and meta["unresolved"] == 0
    bound = meta["uncertainty_ns"]
    assert 0 < bound < 5 * MS
    starts, ends = job.recorded[0::2], job.recorded[1::2]  # each call: arrival, then exit
    enter_err = events["device_enter_ns"].to_numpy() - [e.truth_ns for e in starts]
    exit_err = events["device_exit_ns"].to_numpy() - [e.truth_ns for e in ends]
    assert abs(enter_err).max() <= bound and abs(exit_err).max() <= bound
    # the collective ran after the compute queued before it: the host time says otherwise
    run_ahead = events["device_enter_ns"] - events["enter_ns"]
    assert run_ahead[-1] > 40 * MS  # 20 steps of 4 ms queued by a CPU that did not wait
    assert (events["device_exit_ns"] - events["device_enter_ns"]).min() >= MS


def test_the_calling_thread_never_waits_for_the_device(tmp_path):
    job = Job(tmp_path)
    for _ in range(10):
        job.step(30 * MS)
    behind = job.device.marker()  # still queued when the host is done issuing
    assert not behind.is_set(), "the host waited for the device"
    assert threading.get_ident() not in job.device.queried_from
    events = job.finish()
    assert events.height == 10 and (events["device_enter_ns"] >= 0).all()


def test_pacing_moves_the_device_arrival_by_its_delay_and_the_host_does_not_sleep(
    tmp_path, monkeypatch
):
    slept: list[float] = []

    class Time:  # the tracer's view of the time module: sleeps recorded, not slept
        sleep = slept.append

        def __getattr__(self, name: str):
            return getattr(time, name)

    monkeypatch.setattr(tracer_module, "time", Time())
    job = Job(tmp_path)
    job.tracer.controller = FixedDelays({2: 0.05})
    for _ in range(4):
        job.step(2 * MS)
    events = job.finish()
    steps = load_trace(tmp_path).steps.sort("step")
    assert slept == [] and job.device.delays == [50 * MS]
    assert steps["pacing_delay_ns"].to_list() == [0, 0, 50 * MS, 0]
    # device gap between a call's exit and the next call's arrival: compute, plus the delay
    gaps = (events["device_enter_ns"][1:] - events["device_exit_ns"][:-1]).to_list()
    shift = gaps[1] - (gaps[0] + gaps[2]) / 2
    bound = load_trace(tmp_path).meta[0]["device_clock"]["uncertainty_ns"]
    assert 50 * MS - 2 * bound <= shift <= 50 * MS + 2 * bound + 5 * MS


def test_a_host_call_keeps_host_times_only(tmp_path):
    job = Job(tmp_path)
    job.device.owns = lambda tensor: False  # type: ignore[method-assign]
    job.step(MS)
    events = job.finish()
    assert events["device_enter_ns"].to_list() == [-1]
    assert events["device_exit_ns"].to_list() == [-1]


def test_a_hung_device_neither_hangs_the_close_nor_loses_the_call(tmp_path):
    job = Job(tmp_path, close_timeout_s=0.2)
    job.step(MS)
    job.device.launch(30_000 * MS)  # the device never gets to the next call's events
    job.group.allreduce([torch.ones(4)]).wait()
    started = time.monotonic()
    job.tracer.close()
    closing = time.monotonic() - started
    use_device(None)
    trace = load_trace(tmp_path)
    events = trace.events.sort("seq")
    assert closing < 10  # bounded by close_timeout_s, not by the device
    assert events["status"].to_list() == ["completed", "completed"]
    assert events["device_enter_ns"][0] >= 0 and events["device_exit_ns"][1] == -1
    assert trace.meta[0]["device_clock"]["unresolved"] == 1


FAKE_GPU = Path(__file__).parent / "workers" / "fake_gpu.py"


def _arrivals(events: pl.DataFrame, column: str) -> pl.DataFrame:
    """Per step, which rank reached the collective last by ``column``."""
    return (
        events.filter(pl.col("step") >= 2)  # past the start-up
        .sort(column)
        .group_by("step")
        .agg(pl.col("rank").last().alias("last"))
    )


def _run_ahead(events: pl.DataFrame) -> dict[int, float]:
    ahead = events.group_by("rank").agg((pl.col("device_enter_ns") - pl.col("enter_ns")).median())
    return {r: v / MS for r, v in ahead.sort("rank").rows()}


@pytest.mark.multirank
@pytest.mark.parametrize("mode", ["slow_gpu", "late_cpu"])
def test_the_rank_late_on_the_device_is_found_by_device_time(tmp_path, mode):
    """Three ranks on fake GPUs, one of them late on its device: a slow GPU (its CPU
    runs ahead like the others', while another rank's CPU is the last to enqueue) or a
    late CPU (its device waits for it). The device arrivals name it every step where
    the host's name another rank; the run-ahead tells the two apart."""
    from multirank import run_ranks

    run_ranks(FAKE_GPU, 3, [mode, "1", "12"], env={"TRACE_DIR": str(tmp_path)}, timeout=120)
    trace = load_trace(tmp_path)
    events = trace.events
    assert events.height == 36 and (events["device_enter_ns"] >= 0).all()
    assert all(trace.meta[r]["device_clock"]["resolved"] == 12 for r in range(3))
    device_last = _arrivals(events, "device_enter_ns")["last"].to_list()
    assert device_last.count(1) == len(device_last)
    ahead = _run_ahead(events)
    diagnosis = analyze([str(tmp_path)])
    found = {
        f.ranks: f.evidence.get("late_side") for f in diagnosis.findings if f.mode == "straggler"
    }
    kind = "slow GPU" if mode == "slow_gpu" else "late CPU"
    assert found == {(1,): {1: kind}}, diagnosis.findings
    if mode == "slow_gpu":
        # the host's arrivals point at rank 2, whose CPU is the last to enqueue
        host_last = _arrivals(events, "enter_ns")["last"].to_list()
        assert host_last.count(2) == len(host_last)
        assert ahead[1] > 100  # its CPU far ahead: the device is what is slow
    else:
        assert ahead[1] < 60 < min(ahead[0], ahead[2])
