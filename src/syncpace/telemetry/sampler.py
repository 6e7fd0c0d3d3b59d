"""The host sampler: one per host, counters of the NICs, qdiscs, TCP, InfiniBand,
GPUs, CPUs and the sampling rank's CPU limit (its cgroup) into the run directory, and
the host's PCIe topology at start.

Which rank samples: the first rank of each host to take an exclusive lock on
``host-H.lock`` in the run directory (``flock``: the kernel drops it when the rank's
process ends). That rank starts the sampler as a daemon thread (``host_sampler =
"thread"``, the default) or as a child process (``"process"``: its work never holds
the training process's GIL); its settings are :class:`TelemetryConfig`'s. The child
ends when its parent closes the pipe to it, when the parent dies (end of file, or the
parent's pid gone), or on SIGTERM; the parent waits a bounded time for it at close,
then kills it.

Each tick reads the fast sources (``/proc/net/dev``, the root qdiscs over netlink,
the link rates: what bursts show in; ``/proc/stat``, CPU pressure, the cgroup's
throttling) and, every ``counters_slow_interval_s``, the slow
ones (``/proc/net/snmp`` and ``/proc/net/netstat``, interface attributes, InfiniBand,
NVML, the sampler's own cost). A series is written only where its value changes, with
both ends of every span in which it stays the same (see ``trace/schema.py``), so idle
counters cost nothing and intervals are exact. Every failure is recorded in the host's
facts and never raised: a source that fails is left out, a sampler that fails stops.

One module of ~640 lines: the sampler's whole life (which rank samples and which ranks
it measures, the thread or child that samples, how each ends within its bound) is read
side by side, since a training job must never wait on it; its sources are in
:mod:`.cpustats`, :mod:`.netstats`, :mod:`.nvml` and :mod:`.pcie`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from syncpace.telemetry import cpustats, netstats, nvml, pcie
from syncpace.telemetry.config import TelemetryConfig, parse_link_rates
from syncpace.telemetry.netstats import NO_PORT, Series, Values
from syncpace.trace import schema
from syncpace.trace.hostwriter import CountersWriter, host_paths, write_host_meta

log = logging.getLogger("syncpace")

#: Seconds between writes of buffered rows to the counters file.
FLUSH_INTERVAL_S = 1.0
#: Rows held between flushes, at most; past that new rows are dropped and counted.
MAX_BUFFERED_ROWS = 2_000_000
#: Seconds the parent waits for the child to write its last rows at close.
STOP_TIMEOUT_S = 3.0


class _Group:
    """Sources read together, and the change encoding of their series."""

    def __init__(self, sources: Sequence[Any], first: int, errors: dict[str, str]) -> None:
        self.sources = list(sources)
        self.first = first
        self.size = sum(len(s.series) for s in self.sources)
        self.prev: list[int | None] = [None] * self.size
        self.seen_t = [0] * self.size
        self.seen_tick = [-1] * self.size
        self.written_tick = [-1] * self.size
        self.tick = -1
        self.errors = errors

    def sample(self, t: int, out_t: list[int], out_i: list[int], out_v: list[int]) -> None:
        self.tick = tick = self.tick + 1
        values: Values = []
        for source in self.sources:
            try:
                values.extend(source.read())
            except Exception as exc:  # one failing source must not stop the others
                self.errors.setdefault(type(source).__name__, f"{type(exc).__name__}: {exc}")
                values.extend([None] * len(source.series))
        if len(values) > self.size:  # a source's series grew (ranks registering)
            more = len(values) - self.size
            self.size = len(values)
            self.prev += [None] * more
            self.seen_t += [0] * more
            self.seen_tick += [-1] * more
            self.written_tick += [-1] * more
        prev, seen_t, seen_tick, written = self.prev, self.seen_t, self.seen_tick, self.written_tick
        first = self.first
        for i, v in enumerate(values):
            if v is None:
                continue
            p = prev[i]
            if p is None or v != p:
                if p is not None and written[i] != seen_tick[i]:
                    # the end of the span in which the value stayed p
                    out_t.append(seen_t[i])
                    out_i.append(first + i)
                    out_v.append(p)
                out_t.append(t)
                out_i.append(first + i)
                out_v.append(v)
                written[i] = tick
                prev[i] = v
            seen_t[i] = t
            seen_tick[i] = tick

    def finish(self, out_t: list[int], out_i: list[int], out_v: list[int]) -> None:
        """Write the last value of every series whose last sample is not written yet."""
        for i, p in enumerate(self.prev):
            if p is not None and self.written_tick[i] != self.seen_tick[i]:
                out_t.append(self.seen_t[i])
                out_i.append(self.first + i)
                out_v.append(p)
                self.written_tick[i] = self.seen_tick[i]

    def close(self) -> None:
        for source in self.sources:
            try:
                source.close()
            except Exception:
                pass


class _Self:
    """The sampler's own account: ticks, ticks that started late, CPU time."""

    def __init__(self, sampler: HostSampler) -> None:
        self.sampler = sampler
        self.series: list[Series] = [
            ("sampler", "", NO_PORT, "ticks"),
            ("sampler", "", NO_PORT, "late_ticks"),
            ("sampler", "", NO_PORT, "cpu_ns"),
        ]

    def read(self) -> Values:
        s = self.sampler
        return [s.ticks, s.late_ticks, s.cpu_ns()]

    def close(self) -> None:
        pass


class HostSampler:
    """Samples this host into ``run_dir``; :meth:`run` loops until ``stop`` is set."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        host: str,
        *,
        interval_s: float = 0.01,
        slow_interval_s: float = 0.1,
        nics: str = "",
        link_rates: dict[str, int] | None = None,
        now: Callable[[], int] = time.time_ns,
        offset_ns: Callable[[], int] = lambda: 0,
        root: str | os.PathLike[str] = "/",
        nvml_module: Any = None,
        use_nvml: bool = True,
        qdisc_dumper: Any = None,
        thread_cpu: bool = False,
        facts: dict[str, Any] | None = None,
        job_pid: int | None = None,
    ) -> None:
        self.host = host
        #: The sampling rank's process: this one in thread mode, else the parent.
        self.job_pid = job_pid or (os.getpid() if thread_cpu else os.getppid())
        self.interval_ns = int(interval_s * 1e9)
        self.slow_ns = max(self.interval_ns, int(slow_interval_s * 1e9))
        self.now = now
        self.offset_ns = offset_ns
        self.ticks = 0
        self.late_ticks = 0
        self.dropped_rows = 0
        # a thread of a rank measures its own cost; a process measures all of it
        self._clock_id = (
            time.CLOCK_THREAD_CPUTIME_ID if thread_cpu else time.CLOCK_PROCESS_CPUTIME_ID
        )
        self._cpu0 = time.clock_gettime_ns(self._clock_id)
        self.errors: dict[str, str] = {}
        self._meta_warned = False  # an unwritable facts file is said once, not at each write
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self.meta_path, counters_path = host_paths(run_dir, host)
        self.meta: dict[str, Any] = {
            "host": host,
            "pid": os.getpid(),
            "interval_s": interval_s,
            "slow_interval_s": slow_interval_s,
            "finished": False,
            "started_ns": now() + offset_ns(),
            **(facts or {}),
        }
        self._t: list[int] = []
        self._i: list[int] = []
        self._v: list[int] = []
        fast, slow = self._sources(
            root, nics, link_rates or {}, nvml_module, use_nvml, qdisc_dumper
        )
        self.fast = _Group(fast, 0, self.errors)
        self.slow = _Group(slow, self.fast.size, self.errors)
        # last: its series grow as the host's ranks register
        pattern = schema.rank_pid_name(host, "*")
        self.ranks = _Group(
            [cpustats.RankSched(root, Path(run_dir), pattern)],
            self.fast.size + self.slow.size,
            self.errors,
        )
        self.sources = [*fast, *slow, *self.ranks.sources]
        self.writer = CountersWriter(counters_path, host)
        self._write_meta()

    @property
    def series(self) -> list[Series]:
        """Every series so far, in the order of their indices."""
        return [s for src in self.sources for s in src.series]

    # Sources -----------------------------------------------------------------------
    def _sources(
        self,
        root: str | os.PathLike[str],
        patterns: str,
        rates: dict[str, int],
        nvml_module: Any,
        use_nvml: bool,
        qdisc_dumper: Any,
    ) -> tuple[list[Any], list[Any]]:
        fast: list[Any] = []
        slow: list[Any] = []
        nics = netstats.discover_nics(root, patterns)
        names = [n.name for n in nics]

        def add(
            group: list[Any], name: str, make: Callable[[], Any], facts: str | None = None
        ) -> Any:
            """The source ``make`` builds, in ``group``; one that fails is left out, its
            error kept. With ``facts``, a source this kernel or namespace does not
            offer (no such file) is no error: the host's facts say it is absent."""
            try:
                source = make()
            except Exception as exc:  # absent on this host, or not readable: left out
                if facts is not None and isinstance(exc, FileNotFoundError):
                    self.meta[facts] = {"available": False, "reason": str(exc)}
                else:
                    self.errors.setdefault(name, f"{type(exc).__name__}: {exc}")
                return None
            if facts is not None:
                self.meta[facts] = {"available": True}
            group.append(source)
            return source

        attrs = netstats.NicAttrs(root, names)
        add(fast, "netdev", lambda: netstats.NetDev(root, names))
        qdisc = add(fast, "qdisc", lambda: netstats.Qdisc(nics, qdisc_dumper)) if nics else None
        rate = netstats.LinkRate(names, rates, qdisc, attrs)
        slow.append(attrs)
        add(slow, "snmp", lambda: netstats.snmp(root))
        add(slow, "netstat", lambda: netstats.netstat(root))
        ib = add(slow, "infiniband", lambda: netstats.Infiniband(root))
        add(fast, "procstat", lambda: cpustats.ProcStat(root))
        add(slow, "schedstat", lambda: cpustats.JobSched(root, self.job_pid))
        # Not every kernel has CPU pressure, and a network namespace entered by ``ip
        # netns exec`` has no cgroup filesystem: what is not there is said, not an error.
        add(fast, "pressure", lambda: cpustats.Pressure(root), facts="cpu_pressure")
        cgroup = add(fast, "cgroup", lambda: cpustats.CgroupCpu(root), facts="cgroup")
        if cgroup is not None:
            slow.append(cpustats.CgroupQuota(cgroup))
            self.meta["cgroup"].update(path=cgroup.name, version=cgroup.version)
        gpus = None
        if use_nvml:
            module, why = nvml.open_nvml(nvml_module)
            if module is None:
                self.meta["nvml"] = {"available": False, "reason": why}
            else:
                gpus = add(slow, "nvml", lambda: nvml.Gpus(module))
                self.meta["nvml"] = {"available": gpus is not None}
        slow.append(_Self(self))
        # the rate depends on the shaper (fast) and the speed (slow): read both first
        attrs.read()
        if qdisc is not None:
            try:
                qdisc.read()
            except Exception as exc:
                self.errors.setdefault("qdisc", f"{type(exc).__name__}: {exc}")
        fast.append(rate)
        self.meta["nics"] = [
            {
                **n.to_json(),
                "speed_mbps": attrs.speed_mbps.get(n.name),
                "rate_source": rate.source(n.name),
            }
            for n in nics
        ]
        self.meta["ib_ports"] = [p.to_json() for p in ib.ports] if ib is not None else []
        self.meta["gpus"] = gpus.inventory if gpus is not None else []
        try:
            links = gpus.nvlink_counts() if gpus is not None else None
            self.meta["topology"] = pcie.host_topology(root, links)
        except Exception as exc:
            self.errors.setdefault("topology", f"{type(exc).__name__}: {exc}")
        return fast, slow

    # Loop -----------------------------------------------------------------------------
    def cpu_ns(self) -> int:
        return time.clock_gettime_ns(self._clock_id) - self._cpu0

    def step(self, slow: bool = False) -> None:
        """One tick: the fast sources, and the slow ones when ``slow``."""
        t = self.now()
        if len(self._t) > MAX_BUFFERED_ROWS:
            self.dropped_rows += 1
            return
        self.ticks += 1
        self.fast.sample(t, self._t, self._i, self._v)
        if slow:
            self.slow.sample(t, self._t, self._i, self._v)
            self.ranks.sample(t, self._t, self._i, self._v)

    def run(self, stop: threading.Event, alive: Callable[[], bool] = lambda: True) -> None:
        """Tick every interval until ``stop`` is set or ``alive()`` turns false, then close."""
        try:
            interval, mono = self.interval_ns, time.monotonic_ns
            next_tick = next_slow = mono()
            next_flush = next_tick + int(FLUSH_INTERVAL_S * 1e9)
            while True:
                start = mono()
                due_slow = start >= next_slow
                self.step(slow=due_slow)
                if due_slow:
                    next_slow = start + self.slow_ns
                    if not alive():
                        break
                if start >= next_flush:
                    self.flush()
                    next_flush = start + int(FLUSH_INTERVAL_S * 1e9)
                next_tick += interval
                end = mono()
                if next_tick <= end:  # overran, or descheduled: skip, never burst
                    self.late_ticks += 1
                    next_tick += ((end - next_tick) // interval + 1) * interval
                if _sleep(stop, (next_tick - end) / 1e9):
                    break
        except Exception as exc:  # the sampler stops; the job never notices
            self.errors.setdefault("sampler", f"{type(exc).__name__}: {exc}")
        finally:
            self.close()

    def flush(self) -> None:
        t, i, v = self._t, self._i, self._v
        if not t:
            return
        self._t, self._i, self._v = [], [], []
        self.writer.write(t, i, v, self.series, self.offset_ns())

    def close(self) -> None:
        if self.writer is None:
            return
        try:
            self.fast.finish(self._t, self._i, self._v)
            self.slow.finish(self._t, self._i, self._v)
            self.ranks.finish(self._t, self._i, self._v)
            self.flush()
            self.writer.close()
        except Exception as exc:
            self.errors.setdefault("close", f"{type(exc).__name__}: {exc}")
        self.fast.close()
        self.slow.close()
        self.ranks.close()
        self.meta.update(
            finished=True,
            ticks=self.ticks,
            late_ticks=self.late_ticks,
            rows=self.writer.rows,
            dropped_rows=self.dropped_rows,
            cpu_s=round(self.cpu_ns() / 1e9, 4),
        )
        self.writer = None  # type: ignore[assignment]
        self._write_meta()

    def _write_meta(self) -> None:
        self.meta["errors"] = dict(self.errors)
        try:
            write_host_meta(self.meta_path, self.meta)
        except OSError as exc:
            if not self._meta_warned:
                self._meta_warned = True
                log.warning("syncpace: cannot write %s: %s", self.meta_path, exc)


def _sleep(stop: threading.Event, seconds: float) -> bool:
    """Sleep ``seconds``; True when ``stop`` is set. Short sleeps use ``time.sleep``
    (an Event wait allocates and takes locks at every tick); ``stop`` is then seen
    within one tick."""
    if stop.is_set():
        return True
    if seconds < 0.05:
        time.sleep(max(seconds, 0.0))
        return stop.is_set()
    return stop.wait(seconds)


# Starting it from a rank ------------------------------------------------------------------


def _take_host_lock(run_dir: Path, host: str) -> int | None:
    """An fd holding this host's lock, or None when another rank of the host holds it."""
    path = run_dir / f"{schema.host_stem(host)}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _register(run_dir: Path, host: str, rank: int) -> None:
    """This rank's pid where its host's sampler finds it (written whole, by a rename):
    the sampler measures each rank's own waiting for a CPU."""
    try:
        path = run_dir / schema.rank_pid_name(host, rank)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(str(os.getpid()), encoding="ascii")
        os.replace(tmp, path)
    except OSError:  # the rank goes unmeasured on its own; its host's counters stay
        pass


class SamplerHandle:
    """The rank's side of a running sampler: ``stop()`` ends it within a bound."""

    def __init__(
        self,
        lock_fd: int,
        proc: subprocess.Popen | None = None,
        thread: threading.Thread | None = None,
        stop_event: threading.Event | None = None,
    ) -> None:
        self.lock_fd = lock_fd
        self.proc = proc
        self.thread = thread
        self.stop_event = stop_event

    def stop(self) -> None:
        try:
            if self.proc is not None:
                _stop_child(self.proc)
            if self.thread is not None and self.stop_event is not None:
                self.stop_event.set()
                self.thread.join(timeout=STOP_TIMEOUT_S)
        finally:
            if self.lock_fd >= 0:
                os.close(self.lock_fd)
                self.lock_fd = -1


#: The child's first act, before its imports: yield the CPU to the job's own processes
#: (its start-up costs half a second of CPU, at the moment the job starts measuring).
_CHILD = (
    "import os, sys; os.nice(NICE); "
    "from syncpace.telemetry.sampler import main; sys.exit(main(sys.argv[1:]))"
)
#: The sampler's niceness: its ticks come late on a saturated host (and say so in
#: ``late_ticks``; timestamps stay exact) rather than take CPU from the job.
NICE = 10
_CHILD = _CHILD.replace("NICE", str(NICE))


def _stop_child(proc: subprocess.Popen) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.close()  # end of file: the child writes its last rows and exits
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=1.0)


class SpecClock(Protocol):
    """The tracer's clock as the sampler reads it in another process or thread."""

    def spec(self) -> dict[str, Any]:
        """``base_ns``, ``origin_ns`` and ``rate``: ``now()`` is
        ``m + base_ns + (m - origin_ns) * rate`` for ``m`` the monotonic clock."""
        ...


def start_host_sampler(
    run_dir: str | os.PathLike[str],
    rank: int,
    config: TelemetryConfig,
    clock: SpecClock,
    rank_meta_path: str | os.PathLike[str],
    offset_ns: Callable[[], int],
) -> SamplerHandle | None:
    """Start this host's sampler if this rank is the first of its host; never raises."""
    if config.host_sampler == "off":
        return None
    try:
        out = Path(run_dir)
        host = socket.gethostname()
        _register(out, host, rank)
        lock = _take_host_lock(out, host)
        if lock is None:
            return None
        spec = {
            "run_dir": str(out),
            "host": host,
            "rank": rank,
            "interval_s": config.counters_interval_s,
            "slow_interval_s": config.counters_slow_interval_s,
            "nics": config.counters_nics,
            "link_rate": config.counters_link_rate,
            "clock": clock.spec(),
            "rank_meta": str(rank_meta_path),
            "parent_pid": os.getpid(),
        }
        if config.host_sampler == "thread":
            stop = threading.Event()
            thread = threading.Thread(
                target=_run_in_thread,
                args=(spec, offset_ns, stop),
                name="syncpace-host-sampler",
                daemon=True,
            )
            thread.start()
            return SamplerHandle(lock, thread=thread, stop_event=stop)
        env = dict(os.environ, SYNCPACE_HOST_SAMPLER="off")
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        return SamplerHandle(lock, proc=proc)
    except Exception as exc:  # the job runs without host counters
        log.warning("syncpace: host counters disabled: %s", exc)
        return None


def _run_in_thread(
    spec: dict[str, Any], offset_ns: Callable[[], int], stop: threading.Event
) -> None:
    """The thread's body: even building the sources (NVML's start-up can take a while)
    stays off the training thread."""
    try:
        sampler = _from_spec(spec, offset_ns, thread_cpu=True)
    except Exception as exc:
        log.warning("syncpace: host counters disabled: %s", exc)
        return
    sampler.run(stop)


def _from_spec(
    spec: dict[str, Any], offset_ns: Callable[[], int], thread_cpu: bool = False
) -> HostSampler:
    clock = spec["clock"]
    base, origin, rate = int(clock["base_ns"]), int(clock["origin_ns"]), float(clock["rate"])
    mono = time.monotonic_ns
    if rate:

        def now() -> int:
            m = mono()
            return m + base + int((m - origin) * rate)
    else:

        def now() -> int:
            return mono() + base

    return HostSampler(
        spec["run_dir"],
        spec["host"],
        interval_s=float(spec["interval_s"]),
        slow_interval_s=float(spec["slow_interval_s"]),
        nics=spec.get("nics", ""),
        link_rates=parse_link_rates(spec.get("link_rate", "")),
        now=now,
        offset_ns=offset_ns,
        thread_cpu=thread_cpu,
        facts={"rank": spec.get("rank")},
    )


class _RankOffset:
    """The sampling rank's current clock offset to rank 0, read from its metadata file
    (the tracer rewrites it at every estimate) at most once a second."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self._mtime = 0.0
        self._checked = 0.0

    def __call__(self) -> int:
        now = time.monotonic()
        if now - self._checked >= 1.0:
            self._checked = now
            try:
                mtime = os.stat(self.path).st_mtime
                if mtime != self._mtime:
                    self._mtime = mtime
                    with open(self.path, encoding="utf-8") as f:
                        offset = (json.load(f).get("clock") or {}).get("offset_ns")
                    if isinstance(offset, int):
                        self.offset = offset
            except (OSError, ValueError, AttributeError):
                pass
        return self.offset


def main(argv: list[str]) -> int:
    """The child process: ``python -m syncpace.telemetry.sampler SPEC_JSON``."""
    spec = json.loads(argv[0])
    stop = threading.Event()
    parent = int(spec["parent_pid"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C ends the job; the job ends us
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def watch_stdin() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        stop.set()

    threading.Thread(target=watch_stdin, name="syncpace-parent-pipe", daemon=True).start()
    sampler = _from_spec(spec, _RankOffset(spec["rank_meta"]))
    sampler.run(stop, alive=lambda: os.getppid() == parent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
