"""The per-process tracer: owns the clock, the writer and the iteration counter.

One :class:`Tracer` exists per process (``TRACER``). torch integration
(:mod:`syncpace.capture.torch_hooks`) calls :meth:`Tracer.on_default_group` when the
default process group appears; from then on every traced process group reports
its calls to :meth:`Tracer.completed`. Nothing here may raise into the training
job: failures are logged once and tracing stops.

One module of ~800 lines, on purpose: the hot path (``start``/``completed``, the device
path, the iteration boundary) and the state it reads are one object, so that a call
costs attribute reads of one instance and no cross-module lookups; what can live apart
already does (clock, writer, journal, device timeline, watchdog, host telemetry).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import math
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from syncpace import __version__
from syncpace.capture.clock import ClockSync, OffsetEstimate, local_clock
from syncpace.capture.config import TraceConfig
from syncpace.capture.device import select
from syncpace.capture.devicetime import DeviceTimeline
from syncpace.capture.inflight import InFlight
from syncpace.capture.job import agree_job_id, launcher_facts
from syncpace.capture.log import log, warn_once
from syncpace.capture.metrics import PrometheusMetrics
from syncpace.capture.monitor import LiveMonitor
from syncpace.capture.runtime_control import Control, ControlWatcher, describe
from syncpace.capture.torch_hooks import install, install_backward_mark
from syncpace.capture.watchdog import StallWatchdog, arm_fatal_dump, disarm_fatal_dump
from syncpace.capture.work import TimedWork, classify
from syncpace.config import from_env
from syncpace.control.channel import GatherChannel
from syncpace.control.config import ControllerConfig, PacingConfig
from syncpace.control.controller import PacingController
from syncpace.errors import ConfigError
from syncpace.monitor import MonitorConfig
from syncpace.monitor.detector import Detection
from syncpace.telemetry import TelemetryConfig
from syncpace.telemetry.host import device_facts, rank_facts
from syncpace.telemetry.launchers import launch_place
from syncpace.telemetry.sampler import SamplerHandle, start_host_sampler
from syncpace.trace import schema
from syncpace.trace.columns import EV
from syncpace.trace.journal import NO_SLOT
from syncpace.trace.stall import FATAL_SUFFIX, stall_path
from syncpace.trace.writer import RankTraceWriter

#: The live monitor's window in always-on mode, unless set (steps).
CONTINUOUS_MONITOR_EVERY = 10
#: Clock estimates kept in the metadata (one every clock_interval_s).
MAX_CLOCK_SAMPLES = 200
#: Statuses of a call that raised: the watchdog keeps the stacks of that moment.
_FAILED = ("failed", "timed_out", "aborted")


class Tracer:
    def __init__(
        self,
        config: TraceConfig,
        controller_config: ControllerConfig | None = None,
        pacing_config: PacingConfig | None = None,
        monitor_config: MonitorConfig | None = None,
        telemetry_config: TelemetryConfig | None = None,
    ) -> None:
        self.config = config
        self.telemetry_config = telemetry_config or TelemetryConfig()
        self.clock = local_clock(config.clock_skew_ns, config.clock_drift_ppm)
        self.now = self.clock.now
        self.rank = -1
        self.step = 0
        self.pacing_delay_ns = 0
        self.writer: RankTraceWriter | None = None
        self.groups: dict[str, dict[str, Any]] = {}
        self._offset_ns = 0
        self._clock_meta: dict[str, Any] = {
            "offset_ns": None,
            "uncertainty_ns": None,
            "samples": [],
            # local time = CLOCK_MONOTONIC + base_ns: relates the trace to wall-clock
            # timelines (the profiler's, host telemetry) before the offset to rank 0
            "base_ns": self.clock.base_ns,
            "base_error_ns": self.clock.anchor_error_ns,
        }
        self._clock_sync: ClockSync | None = None
        self._last_boundary = 0
        self._manual_steps = False
        self._lock = threading.Lock()
        self.controller_config = controller_config or ControllerConfig()
        self.pacing_config = pacing_config or PacingConfig()
        self.controller: PacingController | None = None
        self.arrival_step = -1
        self._arrival_ns = 0
        self._live: dict[int, tuple[tuple, Any]] = {}  # token -> (row, work) in flight
        #: Device times (None: host times only); a call's arrival event by its token.
        self.device_timeline: DeviceTimeline | None = None
        self._device_starts: dict[int, Any] = {}
        self.device_delays = 0  # pacing delays placed on the device's stream
        self.device_delay_ns = 0  # of this step's pacing delay, the part on the device
        self.backward_ns = -1  # when this step's first backward pass began (-1: none yet)
        self._armed = 0  # completion callbacks attached and not yet run
        self._armed_cv = threading.Condition()
        self._closing = False
        # Stall watchdog: the registry is fed on the hot path, the thread reads it.
        self.in_flight = InFlight()
        self.watchdog: StallWatchdog | None = None
        self._fatal: Any = None
        self._host_sampler: SamplerHandle | None = None
        self.monitor_config = monitor_config or MonitorConfig()
        if self.config.continuous and not self.monitor_config.monitor_every:
            self.monitor_config = dataclasses.replace(
                self.monitor_config, monitor_every=CONTINUOUS_MONITOR_EVERY
            )
        self.monitor: LiveMonitor | None = None
        self.metrics: PrometheusMetrics | None = None
        self.paused = False  # tracing switched off through the control file
        self.paused_events = 0
        self._paused_steps: list[list[int]] = []
        self._control: ControlWatcher | None = None
        self._control_meta: dict[str, Any] = {}

    # Process groups --------------------------------------------------------------
    def on_group(self, name: str, ranks: list[int], backend: str, desc: str | None = None) -> None:
        entry = self.groups.setdefault(name, {})
        entry.update(ranks=list(ranks), backend=backend)
        if desc is not None:
            entry["desc"] = desc  # torch's group description: "mesh_tp", "default_pg", ...
        if self.writer is not None:
            self.writer.update_meta(groups=self.groups)

    def on_mesh_dim(self, name: str, dim: str) -> None:
        """Group ``name`` serves the DeviceMesh dimension ``dim`` (``tp``, ``dp``, …)."""
        entry = self.groups.setdefault(name, {})
        dims = entry.setdefault("mesh_dims", [])
        if dim not in dims:
            dims.append(dim)
        if self.writer is not None:
            self.writer.update_meta(groups=self.groups)

    def on_default_group(self, rank: int, world_size: int, store: Any, backend: str) -> None:
        self.rank = rank
        device, device_extra = device_facts(launch_place(os.environ, rank).local_rank)
        meta = rank_facts(rank, world_size, device)
        meta["topology"].update({k: v for k, v in device_extra.items() if k == "numa_node"})
        meta.update({k: v for k, v in device_extra.items() if k != "numa_node"})
        meta.update(
            tool_version=__version__,
            backend=backend,
            source="fabric" if os.environ.get("SYNCPACE_FABRIC") else "torch",
            fabric_host=os.environ.get("SYNCPACE_FABRIC_HOST"),
            groups=self.groups,
            # the settings in force in this rank: the tracer's and its host sampler's
            config={
                **dataclasses.asdict(self.config),
                **dataclasses.asdict(self.telemetry_config),
            },
            clock=self._clock_meta,
            launcher=launcher_facts(),
        )
        attach_start = time.monotonic()  # the job id's agreement is part of attaching
        meta["job_id"], meta["job_id_source"] = agree_job_id(
            store, rank, self.config.clock_timeout_s
        )
        clock_sync = ClockSync(
            _clock_store_factory(store, self.config.clock_timeout_s),
            self.clock,
            rank,
            world_size,
            rounds=self.config.clock_rounds,
            interval_s=self.config.clock_interval_s,
            on_estimate=self._on_clock,
            timeout_s=self.config.clock_timeout_s,
        )
        out = Path(self.config.dir or "syncpace-run")
        try:
            self.writer = RankTraceWriter(
                out,
                rank,
                meta,
                flush_interval_s=self.config.flush_interval_s,
                max_buffered=self.config.max_buffered_events,
                offset_ns=lambda: self._offset_ns,
                journal_slots=self.config.journal_slots,
                rotation=self.config.rotation(),
                summaries=self.config.continuous,
            )
        except Exception:
            # Untraced from here on; the other ranks must not wait for this one.
            clock_sync.initial(participate=False)
            raise
        self._clock_sync = clock_sync
        self._start_device_time(self.writer)
        clock_sync.initial()
        if clock_sync.first_round is not None:
            first = clock_sync.first_round
            self._clock_meta["first_round"] = {
                "waited_s": round(first.waited_s, 6),
                "absent_ranks": list(first.absent),
                "failed_ranks": list(first.failed),
                "untraced_ranks": list(first.left),
            }
        self._last_boundary = self.now()
        self.writer.update_meta(
            started_ns=self._last_boundary + self._offset_ns,
            attach_s=round(time.monotonic() - attach_start, 6),
            clock=self._clock_meta,
        )
        clock_sync.start_periodic()
        self._host_sampler = start_host_sampler(
            out,
            rank,
            self.telemetry_config,
            self.clock,
            self.writer.meta_path,
            lambda: self._offset_ns,
        )
        self._start_controller(store, rank, world_size)
        self._start_watchdog(out, rank, world_size, str(meta.get("host", "")))
        self._start_monitor(store, rank, world_size, meta)
        if self.monitor_config.control_poll_s:
            self._control = ControlWatcher(
                self.writer.dir, self.monitor_config.control_poll_s, self._on_control
            )
            self._control.start()
        atexit.register(self.close)
        _install_sigterm(self)
        if self.config.step_hook:
            _install_step_hook(self)
            _install_backward_mark(self)

    def _start_device_time(self, writer: RankTraceWriter) -> None:
        """Time calls on the device where the job has one (see capture/device.py)."""
        try:
            device = select(self.config.device_time)
            if device is None:
                return
            timeline = DeviceTimeline(device, self.now, self.config.flush_interval_s)
        except Exception as exc:  # host times only
            warn_once("device", "device times unavailable: %s", exc)
            return
        self.device_timeline = timeline
        writer.before_flush = lambda closing: self._resolve_device(timeline, writer, closing)

    def _resolve_device(
        self, timeline: DeviceTimeline, writer: RankTraceWriter, closing: bool
    ) -> None:
        """The flush thread: calls whose device events completed go to the writer."""
        wait_s = self.config.close_timeout_s if closing else 0.0
        if timeline.resolve(writer.add_event, wait_s):
            summary = timeline.summary()
            summary["paced_on_device"] = self.device_delays
            writer.update_meta(device_clock=summary)

    def device_owns(self, tensor: Any) -> bool:
        """Whether a call whose first tensor is ``tensor`` (None: it has none) runs on
        the traced device."""
        timeline = self.device_timeline
        return timeline is not None and tensor is not None and timeline.device.owns(tensor)

    def device_start(self, token: int) -> None:
        """Mark the device's arrival at the call of ``token``, about to be issued."""
        timeline = self.device_timeline
        if timeline is None:
            return
        try:
            self._device_starts[token] = timeline.start()
        except Exception as exc:  # host times only from here on
            warn_once("device-start", "device times stopped: %s", exc)
            self.device_timeline = None

    def _start_controller(self, store: Any, rank: int, world_size: int) -> None:
        config = self.controller_config
        if (not self.pacing_config.paced and not config.log_every) or world_size < 2:
            return
        try:
            channel = GatherChannel(store, rank, world_size, 2, config.channel_timeout_s)
            self.controller = PacingController(
                config, self.pacing_config, rank, world_size, channel
            )
        except Exception as exc:  # the job runs unpaced
            warn_once("controller", "pacing disabled: cannot open its channel: %s", exc)

    def _start_monitor(self, store: Any, rank: int, world_size: int, meta: dict) -> None:
        config = self.monitor_config
        host, local_rank = str(meta.get("host")), meta.get("local_rank")
        if config.metrics_port:
            try:
                port = config.metrics_port + int(local_rank or 0)
                self.metrics = PrometheusMetrics(
                    port, config.metrics_addr, rank=rank, host=host, local_rank=local_rank or 0
                )
                self.writer.update_meta(metrics_url=self.metrics.url or None)
            except Exception as exc:  # the job runs without an endpoint
                warn_once("metrics", "no Prometheus endpoint: %s", exc)
        if not config.monitor_every or world_size < 2:
            return
        try:
            where = Placement(store, rank, host, local_rank, config.monitor_timeout_s)
            width = 2 * config.monitor_every + 1  # arrivals, step times, control version
            channel = GatherChannel(
                store, rank, world_size, width, config.monitor_timeout_s, name="monitor"
            )
            self.monitor = LiveMonitor(
                config,
                rank,
                world_size,
                channel,
                record_path=self.writer.dir / f"{schema.rank_stem(rank)}{schema.MONITOR_SUFFIX}",
                where=where.lookup,
                metrics=self.metrics,
                on_detection=self._on_detection,
            )
        except Exception as exc:  # the job runs unmonitored
            warn_once("monitor", "live monitor disabled: %s", exc)

    def _flush_for_stall(self) -> None:
        """The watchdog saw a stall or a failed call: keep full detail around it
        (always-on mode), and flush so the record and the trace agree."""
        writer, keep = self.writer, self.config.anomaly_keep_s
        if writer is None:
            return
        if keep > 0:
            writer.pin(keep, keep, "stall", self.step)
        writer.flush()

    def _on_detection(self, detection: Detection) -> None:
        """Something started: keep full detail around it (always-on mode)."""
        writer, keep = self.writer, self.config.anomaly_keep_s
        if writer is not None and detection.state == "start" and keep > 0:
            writer.pin(keep, keep, f"{detection.kind} {detection.state}", detection.step)

    def _on_control(self, control: Control) -> None:
        """A new control file (the watcher's thread): local changes now, shared ones
        through the monitor once every rank holds the same version."""
        if control.tracing is not None and control.tracing == self.paused:
            self.paused = not control.tracing
            if self.paused:
                self._paused_steps.append([-1, -1])  # filled in by the calls it skips
            elif self._paused_steps and self._paused_steps[-1][0] < 0:
                self._paused_steps.pop()  # paused and resumed between two calls
            log.warning(
                "syncpace: tracing %s at step %d (control file)",
                "paused" if self.paused else "resumed",
                self.step,
            )
        if control.pacing is not None and self.controller is not None:
            self.controller.suspended = not control.pacing
        writer = self.writer
        if control.keep is not None and writer is not None:
            writer.pin(*control.keep, "control file", self.step)
        if control.monitor and self.monitor is not None:
            self.monitor.propose(control.version, control.monitor)
        self._control_meta = describe(control)
        writer = self.writer
        if writer is not None:
            writer.update_meta(control=self._control_state())

    def skip_paused(self) -> None:
        """A call passed through untraced: its step is in the current pause's range
        ([first, last + 1) of the steps with a skipped call: a pause that starts or ends
        within a step covers that step only if one of its calls was skipped)."""
        self.paused_events += 1
        ranges = self._paused_steps
        if ranges:
            current = ranges[-1]
            if current[0] < 0:
                current[0] = self.step
            current[1] = self.step + 1

    def _control_state(self) -> dict[str, Any]:
        return {
            **self._control_meta,
            "paused_steps": self._paused_steps,
            "paused_events": self.paused_events,
        }

    def _start_watchdog(self, out: Path, rank: int, world_size: int, host: str) -> None:
        if self.config.stall_after_s <= 0 or self.writer is None:
            return
        try:
            self.watchdog = StallWatchdog(
                self.in_flight,
                now=self.now,
                offset_ns=lambda: self._offset_ns,
                progress=lambda: (self.step, self._last_boundary),
                flush=self._flush_for_stall,
                path=stall_path(out, rank),
                rank=rank,
                world_size=world_size,
                host=host,
                stall_after_s=self.config.stall_after_s,
                stall_repeat_s=self.config.stall_repeat_s,
            )
            self.watchdog.start()
            self._fatal = arm_fatal_dump(out / f"{schema.rank_stem(rank)}{FATAL_SUFFIX}")
        except Exception as exc:  # the job runs without stall records
            warn_once("watchdog-start", "stall watchdog disabled: %s", exc)
            self.watchdog = None

    # Sync points -------------------------------------------------------------------
    def arrive(self, on_device: bool = False) -> int:
        """First collective of the current step: note the arrival, apply any pacing delay
        (on the device's stream for a call on the device, where the CPU may be far
        ahead and a host sleep would only move the enqueue).

        Returns the time the call is issued (after a host delay)."""
        self.arrival_step = self.step
        now = self._arrival_ns = self.now()
        controller = self.controller
        if controller is not None:
            delay = controller.delay_for(self.step)
            if delay > 0:
                delay_ns = int(delay * 1e9)
                self.pacing_delay_ns += delay_ns
                if on_device and self._delay_on_device(delay_ns):
                    self.device_delay_ns += delay_ns
                    return now
                time.sleep(delay)
                now = self.now()
        return now

    def _delay_on_device(self, delay_ns: int) -> bool:
        timeline = self.device_timeline
        try:
            placed = timeline is not None and timeline.delay(delay_ns)
        except Exception as exc:  # the host sleeps instead
            warn_once("device-delay", "device-side pacing failed: %s", exc)
            return False
        self.device_delays += placed
        return placed

    def _on_clock(self, estimate: OffsetEstimate | None, error: str | None) -> None:
        if estimate is not None:
            self._offset_ns = estimate.offset_ns
            self._clock_meta["offset_ns"] = estimate.offset_ns
            self._clock_meta["uncertainty_ns"] = estimate.uncertainty_ns
            samples = self._clock_meta["samples"]
            samples.append(estimate.to_json())
            del samples[:-MAX_CLOCK_SAMPLES]  # a long run keeps its latest estimates
        if error is not None:
            self._clock_meta["error"] = error
        if self.writer is not None:
            self.writer.update_meta(clock=self._clock_meta)

    # Hot path ----------------------------------------------------------------------
    def begin(self, row: tuple) -> int:
        """A call is entered (``row``: its event without the exit): its token. The
        journal holds it as in flight until its record is made, and the stall
        watchdog's registry (:class:`~syncpace.capture.inflight.InFlight`) until then."""
        self.in_flight.calls[id(row)] = row
        writer = self.writer
        return writer.begin(row) if writer is not None else NO_SLOT

    def completed(self, work: Any, row: tuple, token: int = NO_SLOT) -> Any:
        """Wrap ``work`` so that ``row`` (an event without its exit) is recorded once
        its completion is observed (see :mod:`syncpace.capture.work`)."""
        if self.writer is None:
            self.in_flight.forget(row)
            return work
        if work is None:  # coalesced calls return no work of their own
            self._record(row, "call", "completed", None, -1, token)
            return work
        self._live[token] = (row, work)
        self.in_flight.works[id(row)] = work
        return TimedWork(work, row, token, self._record, self)

    def completed_batch(self, work: Any, calls: list[tuple[tuple, int]]) -> Any:
        """The work of a coalesced batch: every call of ``calls`` completes with it."""
        if self.writer is None:
            for row, _token in calls:
                self.in_flight.forget(row)
            return work
        if work is None:
            self._record_batch(calls, "call", "completed", None, -1, NO_SLOT)
            return work
        for row, token in calls:
            self._live[token] = (row, work)
            self.in_flight.works[id(row)] = work
        return TimedWork(work, calls, NO_SLOT, self._record_batch, self)

    def raised(self, row: tuple, exc: BaseException, token: int = NO_SLOT) -> None:
        """The call itself raised: record it as failed (the caller re-raises)."""
        if self.writer is not None:
            status, error = classify(exc)
            self._record(row, "call", status, error, -1, token)
        else:
            self.in_flight.forget(row)

    def _record(
        self, row: tuple, how: str, status: str, error: str | None, wait_ns: int, token: int
    ) -> None:
        if self._live.pop(token, None) is None and self._closing:
            return  # closing has recorded it already (as pending or aborted)
        writer = self.writer
        if writer is None:
            self.in_flight.forget(row)
            return
        exit_ns = -1 if status == "unobserved" else self.now()
        event = row + (exit_ns, how, status, error, wait_ns)
        start = self._device_starts.pop(token, None) if self._device_starts else None
        if start is None or not self._finish_on_device(event, start, how, status, token):
            writer.add_event(event + (-1, -1), token)
        in_flight, key = self.in_flight, id(row)  # InFlight.recorded, inlined: hot path
        in_flight.calls.pop(key, None)
        in_flight.works.pop(key, None)
        in_flight.last[row[EV.group]] = event
        metrics = self.metrics
        if metrics is not None and exit_ns >= 0:
            metrics.on_collective(
                row[EV.group],
                row[EV.op],
                row[EV.bytes],
                (exit_ns - row[EV.enter_ns]) / 1e9,
                row[EV.group_size],
            )
        if status in _FAILED and self.watchdog is not None:
            self.watchdog.on_failure(event)

    def _finish_on_device(
        self, event: tuple, start: Any, how: str, status: str, token: int
    ) -> bool:
        """Hand a call with an arrival event to the device timeline; its exit is marked
        where the host observed a completion through which the current stream waits for
        the work (``wait``, a future's callback), else left unknown."""
        timeline = self.device_timeline
        if timeline is None:
            return False
        try:
            timeline.finish(event, start, token, exact=status == "completed" and how != "call")
        except Exception as exc:
            warn_once("device-finish", "device times stopped: %s", exc)
            self.device_timeline = None
            return False
        return True

    def _record_batch(
        self, calls: list, how: str, status: str, error: str | None, wait_ns: int, _token: int
    ) -> None:
        for row, token in calls:
            self._record(row, how, status, error, wait_ns, token)

    def armed(self, delta: int) -> None:
        """A completion callback was attached (+1) or has run (-1)."""
        with self._armed_cv:
            self._armed += delta
            if self._armed <= 0:
                self._armed_cv.notify_all()

    # Iterations --------------------------------------------------------------------
    def on_backward(self) -> None:
        """A backward pass begins (``torch.autograd.backward``): the step's first one is
        kept (gradient accumulation runs several). Under the step's lock where it is
        taken: a backward pass on another thread may not land between a step's record
        and its reset, lost to both steps."""
        if self.backward_ns < 0:
            with self._lock:
                if self.backward_ns < 0:
                    self.backward_ns = self.now()

    def on_step(self, manual: bool = False) -> None:
        if manual:
            self._manual_steps = True
        elif self._manual_steps:
            return
        writer = self.writer
        if writer is None:
            return
        with self._lock:
            end = self.now()
            step, start = self.step, self._last_boundary
            writer.add_step(
                (
                    self.rank,
                    step,
                    start,
                    end,
                    self.pacing_delay_ns,
                    self.device_delay_ns,
                    self.backward_ns,
                )
            )
            self.pacing_delay_ns = self.device_delay_ns = 0
            self.backward_ns = -1
            self.step += 1
            self._last_boundary = end
        controller, monitor = self.controller, self.monitor
        if controller is not None or monitor is not None:
            arrived = self.arrival_step == step
            arrival_s = (self._arrival_ns + self._offset_ns) / 1e9 if arrived else math.nan
            if controller is not None:
                controller.on_step_end(step, arrival_s, (end - start) / 1e9)
            if monitor is not None:
                monitor.on_step_end(step, arrival_s, (end - start) / 1e9)
        elif self.metrics is not None:
            self.metrics.on_step(step, (end - start) / 1e9)

    def close(self, reason: str = "exit") -> None:
        """End the trace: wait (bounded by ``close_timeout_s``) for completions still
        being delivered, record calls still in flight, close the files. ``reason`` is
        ``exit``, ``signal`` or ``destroy`` (the default group is being destroyed:
        what is still in flight is aborted with it)."""
        if self._clock_sync is not None:
            self._clock_sync.stop()
        watchdog, self.watchdog = self.watchdog, None
        if watchdog is not None:
            watchdog.stop()
        fatal, self._fatal = self._fatal, None
        try:
            disarm_fatal_dump(fatal)
        except Exception as exc:
            warn_once("fatal-dump", "cannot remove the fatal-signal dump: %s", exc)
        sampler, self._host_sampler = self._host_sampler, None
        if sampler is not None:
            sampler.stop()
        if self.writer is None or self._closing:
            return
        try:
            self._settle(reason)
        except Exception as exc:
            warn_once("settle", "recording the calls in flight at close failed: %s", exc)
        writer, self.writer = self.writer, None
        if writer is not None:
            final: dict[str, Any] = {"closed_by": reason}
            if self.controller is not None:
                final["pacing"] = self.controller.summary()
            if self.monitor is not None:
                final["monitor"] = self.monitor.summary()
            if self._control is not None:
                self._control.stop()
                final["control"] = self._control_state()
            try:
                writer.close(**final)
            except Exception as exc:
                warn_once("close", "closing the trace failed: %s", exc)

    def _settle(self, reason: str) -> None:
        """Let pending completion callbacks run, then record what is still in flight."""
        deadline = time.monotonic() + self.config.close_timeout_s
        with self._armed_cv:
            while self._armed > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._armed_cv.wait(left)
        self._closing = True
        writer = self.writer
        for token in list(self._live):
            entry = self._live.pop(token, None)
            if entry is None or writer is None:
                continue
            row, work = entry
            done = False
            try:
                done = bool(work.is_completed())
            except Exception:
                pass
            if done:  # finished, but nobody looked: no completion time to give
                status, error = "unobserved", None
            elif reason == "destroy":
                status, error = "aborted", "in flight when the process group was destroyed"
            else:
                status, error = "pending", None
            writer.add_event(row + (-1, "unobserved", status, error, -1, -1, -1), token)


class Placement:
    """Where each rank runs, published once in the job's store so that a detection can
    name the straggler's node and local rank. Published and read on a dedicated client
    connection; a rank that never published is skipped without waiting."""

    def __init__(
        self, store: Any, rank: int, host: str, local_rank: int | None, timeout_s: float
    ) -> None:
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self._key = f"where/{attempt}/"
        factory = _clock_store_factory(store, timeout_s)
        self._client: Any = factory() if factory is not None else None
        if self._client is not None:
            self._client.set(f"{self._key}{rank}", json.dumps([host, local_rank]))
        self._known: dict[int, tuple[str, int | None]] = {rank: (host, local_rank)}

    def lookup(self, rank: int) -> tuple[str, int | None] | None:
        if rank in self._known:
            return self._known[rank]
        key = f"{self._key}{rank}"
        try:
            if self._client is None or not self._client.check([key]):
                return None
            host, local = json.loads(self._client.get(key))
        except Exception as exc:
            warn_once("placement", "cannot look up where rank %d runs: %s", rank, exc)
            return None
        self._known[rank] = (str(host), local if isinstance(local, int) else None)
        return self._known[rank]


def _clock_store_factory(store: Any, timeout_s: float) -> Any:
    """A factory of a dedicated client connection to the job's TCPStore, if there is one."""
    import torch.distributed as dist

    base = store
    while hasattr(base, "underlying_store"):
        base = base.underlying_store
    if not isinstance(base, dist.TCPStore):
        return None
    host, port = base.host, base.port
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")

    def connect() -> Any:
        client = dist.TCPStore(
            host,
            port,
            is_master=False,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
        return dist.PrefixStore(f"syncpace/{run_id}/{attempt}/", client)

    return connect


#: (module, function) of callers whose optimizer.step() is no training iteration: torch's
#: distributed checkpoint initialises optimizer state by stepping with zero grads, lr 0.
_NOT_ITERATIONS = (("torch.distributed.checkpoint.state_dict", "_init_optim_state"),)


def _not_an_iteration(depth: int = 8) -> bool:
    """Whether the optimizer step being hooked was called by a _NOT_ITERATIONS caller."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        name = frame.f_code.co_name
        if any(
            name == fn and frame.f_globals.get("__name__") == mod for mod, fn in _NOT_ITERATIONS
        ):
            return True
        frame = frame.f_back
    return False


def _install_step_hook(tracer: Tracer) -> None:
    def on_optimizer_step(*_: Any) -> None:
        if not _not_an_iteration():
            tracer.on_step()

    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(on_optimizer_step)
    except Exception as exc:
        warn_once("step_hook", "no optimizer step hook (%s); call syncpace.step()", exc)


def _install_backward_mark(tracer: Tracer) -> None:
    try:
        install_backward_mark(tracer)
    except Exception as exc:
        warn_once("backward_mark", "no backward mark (%s): overlap judged without it", exc)


def _install_sigterm(tracer: Tracer) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous == signal.SIG_IGN:  # the job ignores SIGTERM: so do we
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        tracer.close("signal")
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        signal.signal(signal.SIGTERM, on_sigterm)
    except (ValueError, OSError):
        pass


TRACER: Tracer | None = None


def get_tracer(**overrides: Any) -> Tracer:
    """The process's tracer; ``overrides`` are fields of TraceConfig, ControllerConfig,
    PacingConfig, MonitorConfig or TelemetryConfig (e.g. ``strategy="early"``), on top
    of ``SYNCPACE_*`` variables."""
    global TRACER
    if TRACER is None:
        classes = (TraceConfig, ControllerConfig, PacingConfig, MonitorConfig, TelemetryConfig)
        parts: list[dict[str, Any]] = [{} for _ in classes]
        for name, value in overrides.items():
            for part, cls in zip(parts, classes, strict=True):
                if name in cls.__dataclass_fields__:
                    part[name] = value
                    break
            else:
                raise ConfigError(f"attach(): unknown setting {name!r}")
        configs = [from_env(cls, **part) for cls, part in zip(classes, parts, strict=True)]
        TRACER = Tracer(*configs)
    elif overrides:
        warn_once("reattach", "attach() ran before in this process; its first settings stay")
    return TRACER


def attach(out: str | None = None, **settings: Any) -> None:
    """Install the tracer in this process (see :func:`syncpace.attach`)."""
    if out is not None:
        settings["dir"] = str(out)
    install(get_tracer(**settings))


def manual_step() -> None:
    if TRACER is not None:
        TRACER.on_step(manual=True)
