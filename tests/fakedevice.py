"""A fake GPU behind the interface the tracer uses for CUDA (``syncpace.capture.device``).

Streams are ordered queues, each run by a thread of its own; events complete when their
stream reaches them, stamped with the device's clock (the host's monotonic clock moved
by an offset and a rate error, as a GPU's timer is). Kernels take the time they are
given. The host enqueues and goes on, so the CPU runs ahead of the device exactly as far
as the work it queued: a rank can be given a slow device (long kernels) or a late CPU
(host work before it enqueues).

``FakeNccl`` is a communicator with NCCL's host semantics: a collective is enqueued on
the device's communication stream behind the caller's current stream, runs there (a
real gloo collective underneath for several ranks, blocking only that stream's thread:
an early rank's "kernel" includes its wait for the others), and its work's ``wait()``
makes the caller's stream wait for it and returns at once.

Every event keeps the host time at which the device completed it (``truth_ns``, on the
clock given to the device): what a test compares the tracer's device times with.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist


class FakeEvent:
    __slots__ = ("device_ns", "truth_ns", "_done")

    def __init__(self) -> None:
        self.device_ns = -1
        self.truth_ns = -1
        self._done = threading.Event()

    def reset(self) -> None:
        self._done.clear()

    def is_set(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float = 30.0) -> bool:
        return self._done.wait(timeout)


class FakeStream:
    """An ordered queue of device work run by its own thread."""

    def __init__(self, device: FakeDevice, name: str) -> None:
        self.device = device
        self.name = name
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"fake-{name}", daemon=True)
        self._thread.start()

    def enqueue(self, kind: str, item: Any) -> None:
        self._queue.put((kind, item))

    def _run(self) -> None:
        while True:
            kind, item = self._queue.get()
            if kind == "kernel":
                time.sleep(item / 1e9)
            elif kind == "record":
                # one read of the host clock for both stamps: two reads apart let a
                # preemption between them (188 us seen on a loaded machine) into the truth
                item.truth_ns = self.device.host_now()
                item.device_ns = self.device.device_at(item.truth_ns)
                item._done.set()
            elif kind == "wait":
                item.wait()
            elif kind == "call":
                item()


class FakeDevice:
    """Implements ``syncpace.capture.device.Device``, and what a test drives."""

    source = "fake"
    resolution_ns = 1000

    def __init__(
        self,
        host_now: Callable[[], int] = time.monotonic_ns,
        offset_ns: int = 7_000_000_000,
        drift_ppm: float = 0.0,
    ) -> None:
        self.host_now = host_now
        self._offset = offset_ns
        self._rate = 1.0 + drift_ppm * 1e-6
        self.compute = FakeStream(self, "compute")
        self.comm = FakeStream(self, "comm")
        self._idle = FakeStream(self, "idle")
        self._local = threading.local()
        #: Threads that asked whether an event completed (the training thread never may).
        self.queried_from: set[int] = set()
        self.delays: list[int] = []

    def device_at(self, host_ns: int) -> int:
        """The device's clock when the host's read ``host_ns``."""
        return int(host_ns * self._rate) + self._offset

    def current(self) -> FakeStream:
        return getattr(self._local, "stream", self.compute)

    # The interface ------------------------------------------------------------------
    def owns(self, tensor: Any) -> bool:
        return isinstance(tensor, torch.Tensor)

    def new_event(self) -> FakeEvent:
        return FakeEvent()

    def record(self, event: FakeEvent) -> None:
        event.reset()
        self.current().enqueue("record", event)

    def record_idle(self, event: FakeEvent) -> None:
        event.reset()
        self._idle.enqueue("record", event)

    def done(self, event: FakeEvent) -> bool:
        self.queried_from.add(threading.get_ident())
        return event.is_set()

    def elapsed_ns(self, first: FakeEvent, second: FakeEvent) -> float:
        return float(second.device_ns - first.device_ns)

    def delay(self, ns: int) -> bool:
        self.delays.append(ns)
        self.current().enqueue("kernel", ns)
        return True

    # What a test does ---------------------------------------------------------------
    def launch(self, ns: int) -> None:
        """A compute kernel of ``ns`` on the current stream."""
        self.current().enqueue("kernel", ns)

    def marker(self, stream: FakeStream | None = None) -> FakeEvent:
        event = FakeEvent()
        (stream or self.current()).enqueue("record", event)
        return event

    def synchronize(self, timeout: float = 60.0) -> None:
        for stream in (self.compute, self.comm):
            if not self.marker(stream).wait(timeout):
                raise TimeoutError(f"fake {stream.name} stream did not drain")


class FakeWork(dist.Work):
    """NCCL's work on the host: ``wait()`` orders the caller's stream after the
    collective and returns."""

    def __init__(self, device: FakeDevice, done: FakeEvent) -> None:
        super().__init__()
        self._device = device
        self._done = done

    def wait(self, timeout: Any = None) -> bool:
        self._device.current().enqueue("wait", self._done)
        return True

    def is_completed(self) -> bool:
        return self._done.is_set()


class FakeNccl:
    """A communicator with NCCL's host semantics over ``group`` (a gloo group, or None
    for one rank: the collective is then a kernel of ``solo_ns``)."""

    def __init__(self, device: FakeDevice, group: Any = None, solo_ns: int = 200_000) -> None:
        self._device = device
        self._group = group
        self._solo_ns = solo_ns
        self.calls = 0

    def rank(self) -> int:
        return self._group.rank() if self._group is not None else 0

    def size(self) -> int:
        return self._group.size() if self._group is not None else 1

    def _set_group_name(self, name: str) -> None:
        pass

    def _set_group_desc(self, desc: str) -> None:
        pass

    def allreduce(self, tensors: list[torch.Tensor], *args: Any) -> FakeWork:
        device = self._device
        ready = device.marker()  # NCCL's stream waits for the caller's
        done = FakeEvent()
        group, solo_ns = self._group, self._solo_ns

        def run() -> None:
            ready.wait()
            if group is not None:
                group.allreduce(tensors).wait()
            else:
                time.sleep(solo_ns / 1e9)

        device.comm.enqueue("call", run)
        device.comm.enqueue("record", done)
        self.calls += 1
        return FakeWork(device, done)
