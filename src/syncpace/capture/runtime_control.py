"""Runtime control: change what a running job traces, without a restart.

Each rank watches ``RUN_DIR/control.json`` from a daemon thread (a ``stat`` every
``control_poll_s``; the file is read only when it changed). The file is trusted only
when it is a regular file of at most 64 KiB owned by the job's user and writable by
nobody else — the same rule ``ssh`` applies to its keys: whoever can write it can
already stop the job. An invalid file is ignored, with one log line per version.

Keys (all optional; see docs/monitoring.md):

* ``"tracing": false`` — stop recording collectives (steps still are; the pause is
  counted and the paused step ranges are in the metadata), ``true`` resumes;
* ``"pacing": false`` — stop applying pacing delays (the pacer keeps deciding, so
  ``true`` resumes at once and the same on every rank);
* ``"keep": {"before_s": 300, "after_s": 600}`` — always-on mode: keep the events of
  the last 300 s and the next 600 s in full, beyond the rotation's window (a new
  version of the file keeps a new window);
* ``"monitor": {"monitor_sensitivity": 6, ...}`` — the live detector's thresholds.
  They change every rank's detector, so they apply only once every rank has read the
  same file: each rank reports the version it holds in its next gathered window.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syncpace.capture.log import warn_once

CONTROL_FILE = "control.json"
MAX_BYTES = 64 * 1024
MONITOR_KEYS = ("monitor_sensitivity", "monitor_min_gap", "monitor_jump")


@dataclass(frozen=True)
class Control:
    """One accepted version of the control file."""

    version: int  # a stable number for the file's content, shared by every rank
    tracing: bool | None = None
    pacing: bool | None = None
    keep: tuple[float, float] | None = None  # (before_s, after_s)
    monitor: dict[str, float] = field(default_factory=dict)


def parse(text: str, source: str) -> Control:
    """Validate the file's content; raise ``ValueError`` naming the problem."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a JSON object")
    unknown = sorted(set(data) - {"tracing", "pacing", "keep", "monitor"})
    if unknown:
        raise ValueError(f"{source}: unknown keys {', '.join(unknown)}")
    switches = {}
    for key in ("tracing", "pacing"):
        value = data.get(key)
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"{source}: '{key}' must be true or false, got {value!r}")
        switches[key] = value
    keep = _keep(data.get("keep"), source)
    monitor = data.get("monitor") or {}
    if not isinstance(monitor, dict):
        raise ValueError(f"{source}: 'monitor' must be an object")
    values: dict[str, float] = {}
    for key, value in monitor.items():
        if key not in MONITOR_KEYS:
            raise ValueError(f"{source}: monitor.{key} is not a runtime setting")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{source}: monitor.{key} must be a number, got {value!r}")
        if not 0 <= value <= 1e6:  # also refuses NaN
            raise ValueError(f"{source}: monitor.{key} must be in 0..1e6, got {value!r}")
        values[key] = float(value)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).digest()
    # 2**52 keeps the version exact when it travels as a float64 in the gathered window.
    version = int.from_bytes(digest[:8], "big") % (1 << 52) or 1
    return Control(version, switches["tracing"], switches["pacing"], keep, values)


def _keep(value: Any, source: str) -> tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"before_s", "after_s"}:
        raise ValueError(f"{source}: 'keep' must be an object with before_s and/or after_s")
    seconds = []
    for key in ("before_s", "after_s"):
        x = value.get(key, 0)
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 31536000:
            raise ValueError(f"{source}: keep.{key} must be seconds in 0..31536000, got {x!r}")
        seconds.append(float(x))
    return seconds[0], seconds[1]


def trusted(path: Path) -> str | None:
    """Why ``path`` must not be obeyed, or ``None`` when it may."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return "absent"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not by this job's uid {os.geteuid()}"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by group or others (chmod go-w)"
    if info.st_size > MAX_BYTES:
        return f"larger than {MAX_BYTES} bytes"
    return None


class ControlWatcher:
    """Polls the control file; calls ``on_change(control)`` for each accepted version."""

    def __init__(self, run_dir: Path, interval_s: float, on_change: Callable[[Control], None]):
        self.path = Path(run_dir) / CONTROL_FILE
        self._interval = interval_s
        self._on_change = on_change
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) last read
        self.current: Control | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="syncpace-control", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.poll()
            except Exception as exc:  # never let the watcher die noisily
                warn_once("control-poll", "control file watcher stopped: %s", exc)
                return

    def poll(self) -> Control | None:
        """Check once (the thread calls this; tests may call it directly)."""
        try:
            info = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return None
        seen = (info.st_mtime_ns, info.st_size)
        if seen == self._seen:
            return None
        self._seen = seen
        problem = trusted(self.path)
        if problem is not None:
            warn_once(f"control-{seen}", "ignoring %s: %s", self.path, problem)
            return None
        try:
            with open(self.path, encoding="utf-8") as f:
                control = parse(f.read(MAX_BYTES + 1), str(self.path))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            warn_once(f"control-{seen}", "ignoring the control file: %s", exc)
            return None
        if self.current is not None and control.version == self.current.version:
            return None
        self.current = control
        self._on_change(control)
        return control


def describe(control: Control) -> dict[str, Any]:
    return {
        "version": control.version,
        "tracing": control.tracing,
        "pacing": control.pacing,
        "keep": list(control.keep) if control.keep else None,
        "monitor": control.monitor,
    }
