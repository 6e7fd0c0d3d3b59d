"""Starting commands with the tracer armed: the parent side of ``syncpace run``.

A traced command runs with ``capture/bootstrap`` first on ``PYTHONPATH``; its
``sitecustomize`` arms the tracer in every Python process that later initialises
``torch.distributed`` (torchrun's workers), and does nothing in the others. Every
launcher of the project (``syncpace run``, the fabric, the benchmark, the demo, the
validation grid) builds its environment here.

A run directory is exclusive: :func:`prepare_run_dir` takes ``syncpace.lock`` in it
(an ``flock`` held for the life of the process, with the owner's pid, host and start
time written inside), so a second launcher into the same directory refuses at once
instead of interleaving its writes with the first's (``--join``, the nodes of one job
sharing a directory, is the exception: each rank writes only its own files). A lock
whose owner is gone is stale and taken over: the kernel drops the ``flock`` of a
killed process, and where the file system keeps no locks, a pid that no longer runs
on this host says so.
"""

from __future__ import annotations

import atexit
import dataclasses
import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from syncpace.capture.config import TraceConfig
from syncpace.config import to_env
from syncpace.control.config import ControllerConfig, PacingConfig
from syncpace.errors import ConfigError
from syncpace.monitor import MonitorConfig
from syncpace.telemetry import TelemetryConfig

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"

#: Everything a traced job is configured with: tracer, controller, pacing policy, monitor,
#: host sampler.
Tracing = tuple[TraceConfig, ControllerConfig, PacingConfig, MonitorConfig, TelemetryConfig]


LOCK_NAME = "syncpace.lock"


@dataclasses.dataclass
class RunLock:
    """This process's hold on a run directory."""

    path: Path
    fd: int
    #: The owner a stale lock named when it was taken over (``None``: it was free).
    took_over: dict | None = None

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            if os.stat(self.path).st_ino == os.fstat(self.fd).st_ino:
                self.path.unlink()  # still ours: leave no lock behind
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1
        _HELD.pop(self.path.parent, None)


_HELD: dict[Path, RunLock] = {}


@atexit.register
def _release_all() -> None:
    for lock in list(_HELD.values()):
        lock.release()


def _owner(fd: int) -> dict:
    try:
        data = os.pread(fd, 4096, 0)
        owner = json.loads(data.decode("utf-8", "replace") or "{}")
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _describe(owner: dict) -> str:
    if not owner:
        return "another process"
    since = owner.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "?"
    return f"pid {owner.get('pid', '?')} on {owner.get('host', '?')} since {when}"


def _runs_here(owner: dict) -> bool:
    """Whether the owner's pid still runs on this host (where no flock can tell)."""
    pid = owner.get("pid")
    if owner.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_run_dir(run_dir: Path) -> RunLock:
    """Hold ``run_dir`` exclusively until this process exits (or :meth:`RunLock.release`).

    Refuses at once, in one line naming the owner, when another live run holds it."""
    if run_dir in _HELD:
        return _HELD[run_dir]
    path = run_dir / LOCK_NAME
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(10):  # a racing owner may remove the file between our open and lock
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise ConfigError(
                f"{path}: cannot create the run directory's lock: {exc.strerror or exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            owner = _owner(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ConfigError(f"{path}: cannot lock: {exc.strerror or exc}") from exc
            raise ConfigError(
                f"{run_dir}: in use by another syncpace run ({_describe(owner)}); "
                "choose another --out or wait for it to end"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # released and removed by its owner meanwhile: try again
            os.close(fd)
            continue
        owner = _owner(fd)
        if owner and (_runs_here(owner) or owner.get("host") != socket.gethostname()):
            os.close(fd)
            raise ConfigError(
                f"{run_dir}: locked by {_describe(owner)}, which "
                + ("still runs" if _runs_here(owner) else "this host cannot check")
                + f"; if no run uses the directory, remove {path}"
            )
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        lock = RunLock(path, fd, took_over=owner or None)
        _HELD[run_dir] = lock
        return lock
    raise ConfigError(f"{path}: the lock kept changing hands; try again")


def prepare_run_dir(out: str | None, overwrite: bool, join: bool = False) -> Path:
    """The run directory, created and locked for this process (:func:`lock_run_dir`);
    an existing trace in it is refused or, with ``overwrite``, its rank files are
    removed. With ``join`` (the launches of one job's nodes sharing a directory) it is
    neither locked nor cleared: each rank writes its own files, and an exclusive lock
    would turn away every node after the first."""
    run_dir = Path(out or time.strftime("syncpace-run-%Y%m%d-%H%M%S")).resolve()
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: exists and is not a directory")
    if join and overwrite:
        raise ConfigError("--join and --force exclude each other")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{run_dir}: cannot create the run directory: {exc.strerror}") from exc
    if join:
        return run_dir
    lock = lock_run_dir(run_dir)
    try:
        existing = sorted(run_dir.glob("rank-*"))
        if existing and not overwrite:
            raise ConfigError(
                f"{run_dir}: already holds a trace ({len(existing)} rank files); "
                "choose another --out, add --force, or --join when the nodes of one "
                "job share this directory"
            )
        for path in existing:
            if path.name.startswith("rank-") and path.suffix in (
                ".json",
                ".arrow",
                ".tmp",
                ".journal",
            ):
                path.unlink()
        for path in sorted(run_dir.glob("host-*")):  # the host sampler's files of a replaced run
            if path.suffix in (".json", ".arrow", ".tmp", ".lock"):
                path.unlink()
    except BaseException:
        lock.release()
        raise
    return run_dir


def traced_env(
    run_dir: Path, config: TraceConfig, base: dict[str, str] | None = None, *extra: object
) -> dict[str, str]:
    """The environment that arms the tracer (and, with ``extra`` configs such as a
    ControllerConfig, the pacer) in every rank the command starts. The host sampler's
    settings are ``extra``'s TelemetryConfig, else its defaults: like the tracer's, they
    are the launcher's, never a variable left in the launcher's own environment."""
    env = dict(os.environ if base is None else base)
    env.update(to_env(config))
    if not any(isinstance(settings, TelemetryConfig) for settings in extra):
        extra = (TelemetryConfig(), *extra)
    for settings in extra:
        env.update(to_env(settings))
    env["SYNCPACE_DIR"] = str(run_dir)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(BOOTSTRAP_DIR) + (os.pathsep + path if path else "")
    return env


def armed_env(
    run_dir: Path, tracing: Tracing, base: dict[str, str] | None = None
) -> dict[str, str]:
    """``traced_env`` for ``run_dir`` with all of ``tracing``."""
    trace, *others = tracing
    trace = dataclasses.replace(trace, dir=str(run_dir))
    return traced_env(run_dir, trace, base, *others)


def run_command(command: list[str], env: dict[str, str]) -> int:
    """Run ``command``, forwarding SIGINT/SIGTERM to it, and return its exit code."""
    try:
        proc = subprocess.Popen(command, env=env)
    except FileNotFoundError as exc:
        raise ConfigError(f"{command[0]}: command not found") from exc
    forwarded = {}

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        forwarded[sig] = signal.signal(sig, forward)
    try:
        return proc.wait()
    finally:
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
