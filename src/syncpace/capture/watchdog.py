"""The stall watchdog: a rank that stops making progress writes down why, in seconds.

A daemon thread looks at the rank's in-flight registry
(:mod:`syncpace.capture.inflight`) and its step counter every ``poll_s``, and at the
moment the oldest call in flight (or the last progress) crosses the threshold, so a
stall is on disk milliseconds after it becomes one. The rank is *stalled* when

* a call has been in flight longer than ``stall_after_s`` (kind ``in_collective``) —
  a work whose completion the caller has not observed yet but the backend reports
  completed does not count; or
* nothing is in flight and neither a step boundary nor a completed call happened for
  ``stall_after_s`` (kind ``no_progress``): the rank is busy or stuck outside
  communication (a data loader, I/O, a rank-dependent branch).

Then it flushes the trace and writes the stall record ``rank-R.stall.json``
(:mod:`syncpace.trace.stall`): the calls in flight, the last completed call of each
group and the Python stack of every thread. It rewrites the record every
``stall_repeat_s`` while the stall lasts, so what a scheduler kills later is already on
disk, and marks it ``resolved`` when progress resumes. A call that raises (timeout,
peer gone) is written down at once with the stacks of the moment (state ``failed``).

A rank killed by a fatal signal (SIGSEGV, SIGABRT from a backend's ``enforce``) runs
no Python at all; :func:`arm_fatal_dump` has Python's faulthandler write every thread's
stack to ``rank-R.fatal.txt`` then, unless the job enabled faulthandler itself.

Everything here runs off the training thread except :meth:`StallWatchdog.on_failure`,
which only runs when a call has already failed. Nothing may raise into the job: any
error logs once and the watchdog stops.
"""

from __future__ import annotations

import faulthandler
import heapq
import os
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from syncpace.capture.inflight import InFlight
from syncpace.capture.log import warn_once
from syncpace.trace.columns import EV
from syncpace.trace.stall import Call, Frame, StallRecord, ThreadStack, write_stall

#: Bounds: calls listed, threads and frames per thread kept, failures captured.
MAX_CALLS = 64
MAX_THREADS = 64
MAX_FRAMES = 48
MAX_FAILURES = 16
#: Calls older than the threshold whose work is polled for completion, per check.
MAX_POLLED = 256
#: Calls in flight looked at per check, oldest first (a job holding more un-waited
#: works than this is judged by its oldest ones).
MAX_SCAN = 4096


def _oldest(calls: dict[int, tuple]) -> list[tuple]:
    """The calls in flight, oldest first, at most MAX_SCAN of them."""
    if len(calls) <= MAX_SCAN:
        return sorted(calls.values(), key=lambda r: r[EV.enter_ns])
    return heapq.nsmallest(MAX_SCAN, calls.values(), key=lambda r: r[EV.enter_ns])


def thread_stacks(skip: int | None = None) -> tuple[ThreadStack, ...]:
    """The Python stack of every thread (outermost frame first), bounded."""
    names = {t.ident: t for t in threading.enumerate()}
    main = threading.main_thread().ident
    stacks = []
    for ident, frame in sorted(sys._current_frames().items(), key=lambda kv: kv[0] != main):
        if ident == skip:
            continue
        summary = traceback.extract_stack(frame)[-MAX_FRAMES:]
        thread = names.get(ident)
        stacks.append(
            ThreadStack(
                name=thread.name if thread is not None else f"thread-{ident}",
                ident=ident,
                frames=tuple(
                    Frame(s.filename, s.lineno or 0, s.name, (s.line or "").strip())
                    for s in summary
                ),
                main=ident == main,
            )
        )
        if len(stacks) >= MAX_THREADS:
            break
    return tuple(stacks)


def arm_fatal_dump(path: Path) -> Any:
    """Have faulthandler write all threads' stacks to ``path`` on a fatal signal.
    Returns the open file (``None`` when the job's own faulthandler stays in charge)."""
    if faulthandler.is_enabled():
        return None
    handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 - open for the process's life
    faulthandler.enable(file=handle, all_threads=True)
    return handle


def disarm_fatal_dump(handle: Any) -> None:
    """Undo :func:`arm_fatal_dump` (the rank closed cleanly) and drop an empty file."""
    if handle is None:
        return
    faulthandler.disable()
    handle.close()
    path = Path(handle.name)
    if path.exists() and path.stat().st_size == 0:
        path.unlink()


class StallWatchdog:
    """Watches one rank (see the module docstring). Start with :meth:`start`."""

    def __init__(
        self,
        registry: InFlight,
        *,
        now: Callable[[], int],
        offset_ns: Callable[[], int],
        progress: Callable[[], tuple[int, int]],
        flush: Callable[[], None],
        path: Path,
        rank: int,
        world_size: int,
        host: str,
        stall_after_s: float,
        stall_repeat_s: float,
    ) -> None:
        self.registry = registry
        self._now = now
        self._offset = offset_ns
        self._progress = progress  # () -> (step, local ns of the last step boundary)
        self._flush = flush
        self.path = path
        self.rank, self.world_size, self.host = rank, world_size, host
        self.after_ns = int(stall_after_s * 1e9)
        self.repeat_ns = int(stall_repeat_s * 1e9)
        self.threshold_s = stall_after_s
        self.poll_s = min(1.0, max(0.02, stall_after_s / 4))
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one writer of the record at a time
        # The open stall episode: (kind, since local ns), first write, last write, writes.
        self._episode: tuple[str, int] | None = None
        self._detected = -1
        self._last_write = -1
        self._updates = 0
        self._failed: Call | None = None
        self._failure_pending: tuple[Call, tuple[ThreadStack, ...], int] | None = None
        self._failures = 0
        self.records_written = 0

    # Lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="syncpace-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (bounded wait) and write what is still pending."""
        self._stop = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        if thread is not None and thread.is_alive():
            return  # still busy writing: it owns the record
        try:
            self._write_failure()
            if self._episode is not None:
                found = self._assess(self._now())
                if found is None:
                    self._store(self._record(None, self._now(), state="resolved", closed=True))
                else:
                    self._write(found, closed=True)
        except Exception as exc:
            warn_once("watchdog-stop", "stall watchdog: final record failed: %s", exc)

    def _run(self) -> None:
        delay = self.poll_s
        while not self._stop:
            self._wake.wait(delay)
            self._wake.clear()
            if self._stop:
                return
            try:
                self._write_failure()
                self.check()
                delay = self._next_look(self._now())
            except Exception as exc:  # the job must not notice: log once, stop watching
                warn_once("watchdog", "stall watchdog stopped: %s", exc)
                return

    def _next_look(self, now: int) -> float:
        """Seconds to the next look: the moment the oldest call in flight (or the last
        progress) crosses the threshold, if that comes before the next poll, so a
        stall is written down when it becomes one rather than up to a poll later."""
        calls, _works, last = self.registry.snapshot()
        if calls:
            start = _oldest(calls)[0][EV.enter_ns]
        else:
            _step, boundary = self._progress()
            start = max([boundary] + [e[EV.exit_ns] for e in last.values() if e[EV.exit_ns] >= 0])
        due = (start + self.after_ns - now) / 1e9 + 0.001
        return self.poll_s if due <= 0 else min(self.poll_s, due)

    # In the failing thread -----------------------------------------------------------
    def on_failure(self, event: tuple) -> None:
        """A call failed (``event`` is its recorded row): keep the stacks of this moment."""
        try:
            self._failures += 1
            if self._failures > MAX_FAILURES:
                return
            call = self._call(event)
            self._failure_pending = (call, thread_stacks(), self._now())
            self._failed = call
            self._wake.set()
        except Exception as exc:
            warn_once("watchdog-failure", "stall watchdog: cannot capture a failure: %s", exc)

    # Checks --------------------------------------------------------------------------
    def _assess(self, now: int) -> tuple[str, int, list[tuple]] | None:
        """``(kind, since local ns, live calls oldest first)`` if stalled, else ``None``."""
        calls, works, last = self.registry.snapshot()
        live = _oldest(calls)
        old = [r for r in live if now - r[EV.enter_ns] > self.after_ns]
        if old:
            finished = set()
            for row in old[:MAX_POLLED]:
                work = works.get(id(row))
                try:
                    if work is not None and work.is_completed():
                        finished.add(id(row))
                except Exception:
                    pass  # a backend that cannot say: count it as in flight
            live = [r for r in live if id(r) not in finished]
            old = [r for r in old if id(r) not in finished]
        if old:
            return "in_collective", old[0][EV.enter_ns], live
        if live:
            return None
        _step, boundary = self._progress()
        activity = max([boundary] + [e[EV.exit_ns] for e in last.values() if e[EV.exit_ns] >= 0])
        if now - activity > self.after_ns:
            return "no_progress", activity, live
        return None

    def check(self) -> StallRecord | None:
        """One look at the rank; writes (or resolves) the record when due. Returns what
        was written, if anything."""
        now = self._now()
        found = self._assess(now)
        with self._lock:
            if found is None:
                if self._episode is None:
                    return None
                record = self._record(None, now, state="resolved")
                self._episode = None
                return self._store(record)
            kind, since, _live = found
            if self._episode != (kind, since):
                self._episode = (kind, since)
                self._detected, self._updates = now, 0
            elif now - self._last_write < self.repeat_ns:
                return None
        return self._write(found)

    def _write(self, found: tuple[str, int, list[tuple]] | None, closed: bool = False) -> Any:
        with self._lock:
            try:
                self._flush()
            except Exception as exc:
                warn_once("watchdog-flush", "stall watchdog: flushing the trace failed: %s", exc)
            record = self._record(found, self._now(), closed=closed)
            return self._store(record)

    def _store(self, record: StallRecord) -> StallRecord:
        write_stall(self.path, record)
        self._last_write = self._now()
        self._updates += 1
        self.records_written += 1
        return record

    def _write_failure(self) -> None:
        pending, self._failure_pending = self._failure_pending, None
        if pending is None:
            return
        call, threads, when = pending
        with self._lock:
            self._detected, self._updates = when, 0
            try:
                self._flush()
            except Exception as exc:
                warn_once("watchdog-flush", "stall watchdog: flushing the trace failed: %s", exc)
            calls, _works, _last = self.registry.snapshot()
            live = _oldest(calls)
            record = self._record(
                ("failed", call.enter_ns - self._offset(), live),
                when,
                state="failed",
                threads=threads,
            )
            self._store(record)
            self._episode = None  # the failure ends any stall: the record says how

    # The record ----------------------------------------------------------------------
    def _record(
        self,
        found: tuple[str, int, list[tuple]] | None,
        now: int,
        *,
        state: str = "stalled",
        threads: tuple[ThreadStack, ...] | None = None,
        closed: bool = False,
    ) -> StallRecord:
        offset = self._offset()
        _calls, _works, last = self.registry.snapshot()
        if found is None:  # resolved: keep what the episode was
            kind, since = self._episode or ("no_progress", now)
            live: list[tuple] = []
        else:
            kind, since, live = found
        step, boundary = self._progress()
        return StallRecord(
            rank=self.rank,
            world_size=self.world_size,
            host=self.host,
            pid=os.getpid(),
            state=state,
            kind=kind,
            threshold_s=self.threshold_s,
            since_ns=since + offset,
            detected_ns=(self._detected if self._detected >= 0 else now) + offset,
            written_ns=now + offset,
            resolved_ns=now + offset if state == "resolved" else -1,
            updates=self._updates + 1,
            closed=closed,
            step=step,
            last_step_ns=boundary + offset,
            in_flight=tuple(self._call(r, offset) for r in live[:MAX_CALLS]),
            in_flight_total=len(live),
            last_completed={g: self._call(e, offset) for g, e in last.items()},
            failed=self._failed,
            threads=thread_stacks(skip=threading.get_ident()) if threads is None else threads,
        )

    def _call(self, row: tuple, offset: int | None = None) -> Call:
        offset = self._offset() if offset is None else offset
        done = len(row) > EV.exit_ns
        exit_ns = row[EV.exit_ns] if done else -1
        return Call(
            group=str(row[EV.group]),
            seq=int(row[EV.seq]),
            op=str(row[EV.op]),
            bytes=int(row[EV.bytes]),
            dtype=str(row[EV.dtype]),
            peer=int(row[EV.peer]),
            step=int(row[EV.step]),
            enter_ns=row[EV.enter_ns] + offset,
            exit_ns=exit_ns + offset if exit_ns >= 0 else -1,
            status=str(row[EV.status]) if done else "in_flight",
            error=row[EV.error] if done else None,
        )
