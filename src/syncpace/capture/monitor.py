"""The live monitor inside each rank: per-step summaries → gathered windows → detections.

Every ``monitor_every`` steps each rank submits its arrivals and step times of the
window with an asynchronous all-gather on a private side channel (not the job's
groups: they are untouched) and collects it ``LAG_STEPS`` steps later, when every rank
has long submitted it, so collecting never waits in a healthy job. Every rank then
runs the same :class:`~syncpace.monitor.OnlineDetector` on the same numbers and
reaches the same detections: no rank is special, and the trace of any rank holds them.
The lowest rank logs the one-line view. Any failure or timeout turns the monitor off
for the rest of the run, logged once; the job goes on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from syncpace.capture.log import warn_once
from syncpace.monitor import Detection, MonitorConfig, OnlineDetector, Window
from syncpace.trace import wholerun

log = logging.getLogger("syncpace")

#: Steps between submitting a window and collecting it.
LAG_STEPS = 2


class Channel(Protocol):
    def submit(self, step: int, values: list[float]) -> None: ...

    def collect(self, step: int) -> np.ndarray: ...


class MetricsSink(Protocol):
    def on_step(self, step: int, step_s: float) -> None: ...

    def on_window(self, lateness_s: float, wait_fraction: float, straggler_cost: float) -> None: ...


Where = Callable[[int], "tuple[str, int | None] | None"]


class LiveMonitor:
    def __init__(
        self,
        config: MonitorConfig,
        rank: int,
        world_size: int,
        channel: Channel,
        *,
        record_path: Path | None,
        where: Where = lambda _rank: None,
        metrics: MetricsSink | None = None,
        on_detection: Callable[[Detection], None] | None = None,
    ) -> None:
        self.config = config
        self._on_detection = on_detection
        self.rank = rank
        self.every = config.monitor_every
        self.detector = OnlineDetector(
            world_size,
            sensitivity=config.monitor_sensitivity,
            min_gap=config.monitor_min_gap,
            jump=config.monitor_jump,
        )
        self._channel = channel
        self._where = where
        self._metrics = metrics
        self._arrivals = np.full(self.every, np.nan)
        self._durations = np.full(self.every, np.nan)
        self._submitted: dict[int, int] = {}  # collect at step -> window's first step
        self._record_path = record_path
        self._lock = threading.Lock()
        self.enabled = True
        self.error: str | None = None
        self.detections: list[Detection] = []
        self.windows = 0
        # Thresholds from the control file: proposed by this rank, applied once the
        # gathered window shows every rank proposing the same version.
        self._proposed: tuple[int, dict[str, float]] | None = None
        self.applied_version = 0
        self.applied_at_step: int | None = None

    def propose(self, version: int, thresholds: dict[str, float]) -> None:
        """New detector thresholds (from any thread); they apply on agreement."""
        self._proposed = (version, dict(thresholds))

    # Step boundary (training thread) ---------------------------------------------------
    def on_step_end(self, step: int, arrival_s: float, duration_s: float) -> None:
        if not self.enabled:
            return
        if self._metrics is not None:
            self._metrics.on_step(step, duration_s)
        slot = step % self.every
        self._arrivals[slot] = arrival_s
        self._durations[slot] = duration_s
        try:
            if slot == self.every - 1:
                first = step - self.every + 1
                proposed = self._proposed
                version = float(proposed[0]) if proposed is not None else 0.0
                values = [*self._arrivals.tolist(), *self._durations.tolist(), version]
                self._channel.submit(first, values)
                self._submitted[step + LAG_STEPS] = first
                self._arrivals[:] = np.nan
                self._durations[:] = np.nan
            first = self._submitted.pop(step, None)
            if first is not None:
                self._process(first, self._channel.collect(first))
        except Exception as exc:
            self.fail(str(exc))

    def _process(self, first: int, data: np.ndarray) -> None:
        window = Window(first, data[:, : self.every], data[:, self.every : 2 * self.every])
        self.windows += 1
        self._agree(first + self.every - 1, data[:, -1])
        for detection in self.detector.observe(window):
            self.detections.append(detection)
            self._write(detection)
            if self._on_detection is not None:
                self._on_detection(detection)
            if self.rank == 0:
                log.warning("%s", self.describe(detection))
        if self._metrics is not None:
            score = self.detector.score(self.rank, recent=self.every)
            since = self.detector.since.get(self.rank)  # set while this rank straggles
            cost = 0.0
            if since is not None:
                span = first + self.every - since
                cost = self.detector.score(self.rank, recent=max(1, span)).cost
            self._metrics.on_window(score.lateness_s, score.wait_fraction, cost)

    def _agree(self, step: int, versions: np.ndarray) -> None:
        proposed = self._proposed
        if proposed is None or proposed[0] == self.applied_version:
            return
        if not (versions == float(proposed[0])).all():
            return  # some rank has not read the same file yet
        version, thresholds = proposed
        d = self.detector
        d.h = thresholds.get("monitor_sensitivity", d.h)
        d.min_gap = thresholds.get("monitor_min_gap", d.min_gap)
        d.jump = thresholds.get("monitor_jump", d.jump)
        self.applied_version, self.applied_at_step = version, step
        if self.rank == 0:
            log.warning(
                "syncpace step %d: live detector thresholds changed (control file): %s",
                step,
                ", ".join(f"{k} {v:g}" for k, v in sorted(thresholds.items())),
            )

    # Output ------------------------------------------------------------------------------
    def describe(self, d: Detection) -> str:
        """The one-line view of a detection, as the log shows it."""
        if d.kind == "step_time_jump":
            change = "up" if d.state == "start" else "back"
            return (
                f"syncpace step {d.step}: iteration time {change}: median "
                f"{d.detail.get('median_s', 0) * 1e3:.1f} ms against "
                f"{d.detail.get('baseline_s', 0) * 1e3:.1f} ms before ({d.cost:+.0%})"
            )
        who = f"rank {d.rank}"
        place = self._where(d.rank) if d.rank is not None else None
        if place is not None:
            host, local = place
            who += f" (node {host}" + (f", local rank {local})" if local is not None else ")")
        since = d.detail.get("since_step", d.step)
        if d.state == "start":
            return (
                f"syncpace step {d.step}: straggler: {who} late in {d.share:.0%} of the last "
                f"{d.steps_seen} steps, costing {d.cost:.1%} (since step {since})"
            )
        return (
            f"syncpace step {d.step}: straggler over: {who}, after {d.step - since + 1} steps "
            f"(from step {since}; it cost {d.cost:.1%} over them)"
        )

    def _write(self, detection: Detection) -> None:
        if self._record_path is None:
            return
        try:
            line = wholerun.detection_line(detection.to_json())
        except ValueError as exc:  # a value JSON cannot hold: left out, never raised
            warn_once("monitor-record", "cannot record a detection: %s", exc)
            return
        try:
            with self._lock, open(self._record_path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as exc:
            warn_once("monitor-write", "cannot record detections in %s: %s", self._record_path, exc)

    def fail(self, reason: str) -> None:
        if self.enabled:
            log.warning("syncpace: live monitor turned off for the rest of the run: %s", reason)
        self.enabled = False
        self.error = reason

    def summary(self) -> dict[str, Any]:
        return {
            "every": self.every,
            "windows": self.windows,
            "detections": len(self.detections),
            "active_stragglers": sorted(self.detector.active),
            "thresholds": {
                "monitor_sensitivity": self.detector.h,
                "monitor_min_gap": self.detector.min_gap,
                "monitor_jump": self.detector.jump,
            },
            "control_version": self.applied_version or None,
            "control_applied_at_step": self.applied_at_step,
            "enabled": self.enabled,
            "error": self.error,
        }
