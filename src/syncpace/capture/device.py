"""The device a traced call runs on, behind the small interface the tracer needs.

On a GPU the host only enqueues work: NCCL's ``wait()`` makes the caller's stream wait
and returns, and a work's future completes at enqueue, so host times describe when
the CPU issued a collective, not when the device ran it. The tracer therefore marks
each call on the device itself: an event recorded on the issuing stream just before
the call (it completes once the work queued before the collective is done: the
device's *arrival*) and one recorded where the host observes the completion (after
``wait()`` the caller's stream waits for the collective; a future's callback runs on
streams that wait for it): the device's *exit*. Nothing here synchronises the device
or blocks the caller: events are recorded on the hot path and queried later, from the
writer's flush thread (:mod:`syncpace.capture.devicetime`).

Why events of our own rather than torch's machinery: the Flight Recorder records CUDA
events on the NCCL stream, but exposes their times only through its dumps (durations
only with ``TORCH_NCCL_ENABLE_TIMING``; "discovered" times are watchdog poll times),
and the completion hook hands over the same durations on the watchdog thread, NCCL
only. Neither gives a start on a clock that can be placed beside the host's, and
neither covers gloo on CUDA tensors. Two events per call, on the caller's stream, work
for every backend, need no setting, and their absolute times follow from anchors
(:class:`~syncpace.capture.devicetime.DeviceTimeline`).

:class:`Device` is what the tracer needs of a device; :class:`CudaDevice` is CUDA's.
Tests drive the same tracer code through a fake device (``tests/fakedevice.py``):
streams as ordered queues on their own threads, events on a device clock.
"""

from __future__ import annotations

from typing import Any, Protocol

from syncpace.capture.log import warn_once


class Device(Protocol):
    """What the tracer needs of a device. Every method is safe from any thread; none
    waits for the device."""

    #: Written to the metadata (``device_clock.source``): how device times were taken.
    source: str
    #: The resolution of :meth:`elapsed_ns`, in ns (CUDA events: about 0.5 µs).
    resolution_ns: int

    def owns(self, tensor: Any) -> bool:
        """Whether a call whose first tensor is ``tensor`` runs on this device."""
        ...

    def new_event(self) -> Any:
        """A timing event, not yet recorded (the timeline pools them)."""
        ...

    def record(self, event: Any) -> None:
        """Record ``event`` on the calling thread's current stream."""
        ...

    def record_idle(self, event: Any) -> None:
        """Record ``event`` on a stream of the device's own with nothing queued: it
        completes as soon as the device sees it (an anchor)."""
        ...

    def done(self, event: Any) -> bool:
        """Whether ``event`` has completed on the device. Never waits for the device."""
        ...

    def elapsed_ns(self, first: Any, second: Any) -> float:
        """Device time from ``first`` to ``second`` (negative when ``second`` came
        first); both completed."""
        ...

    def delay(self, ns: int) -> bool:
        """Keep the current stream busy for ``ns`` before what is enqueued next (the
        pacer's delay on the device). False when it cannot yet (the caller sleeps on
        the host instead)."""
        ...


class CudaDevice:
    """CUDA: timing events from ``torch.cuda.Event``, pacing by a calibrated spin
    kernel (``torch.cuda._sleep``). Built lazily: only a job with CUDA tensors pays."""

    source = "cuda_event"
    resolution_ns = 500
    #: Cycles of the calibration spin: about a millisecond on current GPUs.
    CALIBRATION_CYCLES = 1_000_000

    def __init__(self) -> None:
        import torch  # only where a device is in use

        self._torch = torch
        self._idle: dict[int, Any] = {}  # device index -> its anchor stream
        # The job's device, as its tensors say: the flush thread that anchors has a
        # current device of its own (0), and events on two devices have no interval.
        self._index: int | None = None
        self._cycles_per_ns: float | None = None
        self._calibration: tuple[Any, Any] | None = None

    def owns(self, tensor: Any) -> bool:
        if not getattr(tensor, "is_cuda", False):
            return False
        self._index = tensor.device.index
        return True

    def new_event(self) -> Any:
        return self._torch.cuda.Event(enable_timing=True)

    def record(self, event: Any) -> None:
        event.record()

    def record_idle(self, event: Any) -> None:
        event.record(self._idle_stream())

    def _idle_stream(self) -> Any:
        index = self._index if self._index is not None else self._torch.cuda.current_device()
        stream = self._idle.get(index)
        if stream is None:
            stream = self._idle[index] = self._torch.cuda.Stream(device=index)
        return stream

    def done(self, event: Any) -> bool:
        return bool(event.query())

    def elapsed_ns(self, first: Any, second: Any) -> float:
        return first.elapsed_time(second) * 1e6

    def delay(self, ns: int) -> bool:
        rate = self._cycles_per_ns or self._calibrated()
        if rate is None:
            return False
        self._torch.cuda._sleep(max(1, int(ns * rate)))
        return True

    def _calibrated(self) -> float | None:
        """Cycles per ns of the spin kernel, measured once on the anchor stream
        without waiting: the first call starts the measurement, a later one reads it."""
        try:
            if self._calibration is None:
                start, end = self.new_event(), self.new_event()
                stream = self._idle_stream()
                with self._torch.cuda.stream(stream):
                    start.record()
                    self._torch.cuda._sleep(self.CALIBRATION_CYCLES)
                    end.record()
                self._calibration = (start, end)
                return None
            start, end = self._calibration
            if not end.query():
                return None
            self._cycles_per_ns = self.CALIBRATION_CYCLES / (start.elapsed_time(end) * 1e6)
        except Exception as exc:  # no spin kernel here: the pacer sleeps on the host
            warn_once("device-delay", "device-side pacing unavailable: %s", exc)
            self._cycles_per_ns = None
            self._calibration = (None, None)
            self.delay = lambda ns: False  # type: ignore[method-assign]
        return self._cycles_per_ns


#: A device the tracer uses instead of CUDA's (set before the job's first group).
_override: list[Device] = []


def use_device(device: Device | None) -> None:
    """Trace calls on ``device`` (another accelerator's implementation, or a test's
    fake) instead of CUDA; None goes back to CUDA."""
    _override.clear()
    if device is not None:
        _override.append(device)


def select(enabled: bool) -> Device | None:
    """The device to time calls on: the one :func:`use_device` set, else CUDA when
    torch has it, else None (host times only)."""
    if not enabled:
        return None
    if _override:
        return _override[0]
    try:
        import torch

        if torch.cuda.is_available():
            return CudaDevice()
    except Exception as exc:  # a broken CUDA install: host times only
        warn_once("device", "device times unavailable: %s", exc)
    return None
