"""Device times of traced calls: events marked on the hot path, resolved off it.

The training thread only records two pooled events per call on a device
(:meth:`DeviceTimeline.start`, :meth:`DeviceTimeline.finish`) and hands the call's row
over; it never queries an event and never waits. The writer's flush thread
(:meth:`DeviceTimeline.resolve`) asks each pending call's events whether they have
completed, turns completed ones into times on the host clock and hands the full row to
the writer. A call stays in the crash journal's in-flight table until then: a rank
that dies while the device is still behind leaves it ``pending``, which is what it is.

Absolute times come from **anchors**: the flush thread records an event on a stream
with nothing queued, reading the host clock just before and just after it sees the
event complete; the device time of any other event is the anchor's host midpoint plus
the device-measured interval between the two (``cudaEventElapsedTime``). The anchor's
half-width, the timer's resolution and the drift seen between consecutive anchors
(re-anchored every ``anchor_every_s``) bound the error, stated per run in the
metadata (``device_clock.uncertainty_ns``).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from syncpace.capture.device import Device
from syncpace.capture.log import warn_once

#: Longest the flush thread waits for an anchor's event, which normally completes in
#: microseconds; a device that takes longer is too busy to anchor against now.
ANCHOR_WAIT_S = 0.05
#: Anchors kept: a call is converted with the one nearest to it in device time.
ANCHORS_KEPT = 8
#: Events kept for reuse (creating a CUDA event costs more than recording one).
POOL_SIZE = 4096
#: A call whose device events have not completed this long after the host saw it is
#: written without device times (the device is hung or the events were lost).
STALE_NS = 60_000_000_000


@dataclass(frozen=True, slots=True)
class Anchor:
    event: Any
    host_ns: int  # midpoint of the host reads around the event's completion
    half_ns: int  # half their distance: the anchor's own uncertainty


@dataclass(slots=True)
class _Pending:
    row: tuple  # the event without its device times
    start: Any  # recorded before the call on the issuing stream
    end: Any  # recorded where the host observed completion; None: no device exit
    token: int
    seen_ns: int  # host time the call was handed over


class DeviceTimeline:
    """One rank's device times. ``now`` is the tracer's clock (the rows' clock)."""

    def __init__(self, device: Device, now: Callable[[], int], anchor_every_s: float = 1.0) -> None:
        self.device = device
        self._now = now
        self._anchor_every_ns = int(anchor_every_s * 1e9)
        self._pool: deque[Any] = deque()
        self._pending: deque[_Pending] = deque()
        self._anchors: deque[Anchor] = deque(maxlen=ANCHORS_KEPT)
        self._drift = 0.0  # largest |host - device| rate seen between anchors
        self._resolving = threading.Lock()  # one resolver at a time (flusher, close, stall)
        self.resolved = 0
        self.unresolved = 0  # written without device times
        self.failed_anchors = 0
        self.worst_ns = 0  # the largest uncertainty of a converted time

    # Hot path ------------------------------------------------------------------
    def start(self) -> Any:
        """Mark the device's arrival at a call about to be issued: an event on the
        current stream, completed once the work queued before the call is done."""
        try:
            event = self._pool.pop()
        except IndexError:
            event = self.device.new_event()
        self.device.record(event)
        return event

    def finish(self, row: tuple, start: Any, token: int, exact: bool) -> None:
        """The host observed the call's completion (``row``: its event without device
        times). ``exact``: the current stream now waits for the call's work, so an
        event recorded on it marks the device's exit; else the exit is not known."""
        end = None
        if exact:
            try:
                end = self._pool.pop()
            except IndexError:
                end = self.device.new_event()
            self.device.record(end)
        self._pending.append(_Pending(row, start, end, token, self._now()))

    def delay(self, ns: int) -> bool:
        """The pacer's delay placed on the device's current stream."""
        return self.device.delay(ns)

    # Flush thread --------------------------------------------------------------
    def resolve(self, add: Callable[[tuple, int], None], wait_s: float = 0.0) -> bool:
        """Hand every call whose events have completed to ``add(row, token)``, with its
        device times; wait up to ``wait_s`` for the rest, then (``wait_s`` > 0, the
        trace is closing) hand them over without. True when anything changed."""
        if not self._pending:
            return False
        # another thread resolving now hands these over itself; a close waits for it
        got = (
            self._resolving.acquire(timeout=wait_s)
            if wait_s > 0
            else self._resolving.acquire(False)
        )
        if not got:
            return False
        try:
            return self._resolve_locked(add, wait_s)
        finally:
            self._resolving.release()

    def _resolve_locked(self, add: Callable[[tuple, int], None], wait_s: float) -> bool:
        self._maybe_anchor()
        deadline = time.monotonic() + wait_s
        changed = False
        while True:
            changed |= self._resolve_once(add)
            if not self._pending or time.monotonic() >= deadline:
                break
            time.sleep(0.001)
        if wait_s > 0:
            while self._pending:
                item = self._pending.popleft()
                self.unresolved += 1
                add(item.row + (-1, -1), item.token)
                changed = True
        return changed

    def _resolve_once(self, add: Callable[[tuple, int], None]) -> bool:
        device, now, changed = self.device, self._now(), False
        anchors = list(self._anchors)
        hosts = [a.host_ns for a in anchors]
        for _ in range(len(self._pending)):
            item = self._pending.popleft()
            ready = device.done(item.start) and (item.end is None or device.done(item.end))
            if ready and anchors:
                anchor = _nearest(anchors, hosts, item.seen_ns)
                enter, enter_err = self._convert(anchor, item.start)
                exit_, exit_err = (
                    self._convert(anchor, item.end) if item.end is not None else (-1, 0)
                )
                self.worst_ns = max(self.worst_ns, enter_err, exit_err)
                self.resolved += 1
                add(item.row + (enter, exit_), item.token)
                self._recycle(item.start, item.end)
                changed = True
            elif now - item.seen_ns > STALE_NS:
                self.unresolved += 1
                add(item.row + (-1, -1), item.token)
                changed = True
            else:
                self._pending.append(item)
        return changed

    def _recycle(self, *events: Any) -> None:
        for event in events:
            if event is not None and len(self._pool) < POOL_SIZE:
                self._pool.append(event)

    # Anchors -------------------------------------------------------------------
    def _maybe_anchor(self) -> None:
        anchors = self._anchors
        if anchors and self._now() - anchors[-1].host_ns < self._anchor_every_ns:
            return
        anchor = self._anchor()
        if anchor is None:
            return
        if anchors:
            last = anchors[-1]
            span = anchor.host_ns - last.host_ns
            if span > 0:
                predicted = last.host_ns + self.device.elapsed_ns(last.event, anchor.event)
                residual = abs(predicted - anchor.host_ns) - anchor.half_ns - last.half_ns
                self._drift = max(self._drift, max(residual, 0.0) / span)
        anchors.append(anchor)

    def _anchor(self) -> Anchor | None:
        device = self.device
        try:
            event = device.new_event()
            before = self._now()
            device.record_idle(event)
            deadline = time.monotonic() + ANCHOR_WAIT_S
            while not device.done(event):
                if time.monotonic() > deadline:
                    self.failed_anchors += 1
                    return None
                time.sleep(20e-6)
            after = self._now()
        except Exception as exc:  # no anchor: the calls wait for the next flush
            warn_once("device-anchor", "cannot anchor the device clock: %s", exc)
            self.failed_anchors += 1
            return None
        return Anchor(event, (before + after) // 2, (after - before + 1) // 2)

    def _convert(self, anchor: Anchor, event: Any) -> tuple[int, int]:
        """``event``'s time on the host clock from ``anchor``, and its uncertainty: the
        anchor's, the timer's and the drift's over the interval between them."""
        gap = self.device.elapsed_ns(anchor.event, event)
        error = anchor.half_ns + self.device.resolution_ns + self._drift * abs(gap)
        return anchor.host_ns + round(gap), int(error)

    def summary(self) -> dict[str, Any]:
        """What the metadata says of this rank's device clock (``device_clock``)."""
        return {
            "source": self.device.source,
            "uncertainty_ns": self.worst_ns if self.resolved else None,
            "anchors": len(self._anchors),
            "failed_anchors": self.failed_anchors,
            "drift_ppm": round(self._drift * 1e6, 3),
            "resolved": self.resolved,
            "unresolved": self.unresolved,
            "pending": len(self._pending),
        }


def _nearest(anchors: list[Anchor], hosts: list[int], host_ns: int) -> Anchor:
    """The anchor nearest to a call the host saw at ``host_ns`` (``hosts``: the
    anchors' host times, ascending). The device ran the call at or after that, and
    anchors come once a flush: choosing by host time costs no query of the device."""
    i = bisect.bisect_left(hosts, host_ns)
    if i == len(anchors) or (i > 0 and host_ns - hosts[i - 1] <= hosts[i] - host_ns):
        return anchors[i - 1]
    return anchors[i]
