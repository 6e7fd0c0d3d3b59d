"""What a host's kernel counts about its CPUs and the job's CPU limit: the CPU sources
the host sampler reads (same contract as :mod:`syncpace.telemetry.netstats`).

* :class:`ProcStat`: the first line of ``/proc/stat``: the time all CPUs spent in user,
  system, idle, iowait and steal (host-wide, in ns).
* :class:`Pressure`: ``/proc/pressure/cpu``: the time some runnable task waited for a
  CPU (pressure stall information), host-wide, in µs, where the kernel has it.
* :class:`JobSched`: the sampling rank's threads: how long they ran, and how long they
  were runnable but waited for a CPU.
* :class:`RankSched`: every rank of the host on its own (each registers its process
  in the run directory): its threads' run and wait times, and its main thread's, the
  one that computes. A rank late because it waited for a CPU shows here; one late by
  its own doing (sleeping, computing more) does not, whatever the host's load.
* :class:`CgroupCpu`: the CPU controller of the sampler's own cgroup (the sampling
  rank's: a child process stays in its parent's cgroup): the scheduling periods, how
  many of them throttled the group at its quota and for how long, and the quota
  itself. A container or job limit that starves a host's ranks shows here, not in the
  host-wide numbers.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from syncpace.telemetry.netstats import NO_PORT, PFile, Series, Values, _int

#: The jiffies ``/proc/stat`` counts in (``sysconf(_SC_CLK_TCK)``; 100 on Linux).
_TICK_NS = 1_000_000_000 // (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


class ProcStat:
    """Host-wide CPU time by state, in ns, and the number of CPUs online."""

    FIELDS = ("user_ns", "nice_ns", "system_ns", "idle_ns", "iowait_ns", "irq_ns")
    FIELDS += ("softirq_ns", "steal_ns")

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.file = PFile(Path(root, "proc/stat"))
        self.series: list[Series] = [("cpu", "", NO_PORT, f) for f in (*self.FIELDS, "cpus")]

    def read(self) -> Values:
        lines = self.file.read().splitlines()
        total = lines[0].split() if lines else []
        if not total or total[0] != b"cpu":
            return [None] * len(self.series)
        out: Values = []
        for i in range(len(self.FIELDS)):
            value = _int(total[1 + i]) if 1 + i < len(total) else None
            out.append(None if value is None else value * _TICK_NS)
        cpus = sum(1 for line in lines[1:] if line.startswith(b"cpu"))
        out.append(cpus or None)
        return out

    def close(self) -> None:
        self.file.close()


class Pressure:
    """``some`` CPU pressure: the total time (µs) at least one task waited for a CPU."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.file = PFile(Path(root, "proc/pressure/cpu"))
        self.series: list[Series] = [("cpu", "", NO_PORT, "pressure_some_us")]
        self.read()  # fails here where the kernel has no pressure information

    def read(self) -> Values:
        for line in self.file.read().splitlines():
            if line.startswith(b"some "):
                for part in line.split()[1:]:
                    if part.startswith(b"total="):
                        return [_int(part[6:])]
        return [None]

    def close(self) -> None:
        self.file.close()


class JobSched:
    """The sampling rank's process: the time its threads ran and the time they were
    runnable but waited for a CPU (``/proc/PID/task/*/schedstat``), summed over its
    threads, in ns. Waiting is what starvation looks like from inside: a CPU limit
    that throttles the job, or more runnable threads than CPUs. Unlike the cgroup
    files, procfs is there in every network namespace and container."""

    def __init__(self, root: str | os.PathLike[str], pid: int) -> None:
        self.tasks = Path(root, f"proc/{pid}/task")
        self.series: list[Series] = [
            ("cpu", "", NO_PORT, "job_run_ns"),
            ("cpu", "", NO_PORT, "job_wait_ns"),
        ]
        # A thread that ends takes its schedstat with it: what it last showed is kept
        # here so that the sums are counters, never falling when a thread exits.
        self._last: dict[str, tuple[int, int]] = {}
        self._ended = (0, 0)
        self._lock = threading.Lock()  # scrapes may come on several server threads
        if self.read() == [None, None]:
            raise FileNotFoundError(f"{self.tasks}: no schedstat of the job's threads")

    def read(self) -> Values:
        with self._lock:
            return self._read()

    def _read(self) -> Values:
        try:
            tasks = os.listdir(self.tasks)
        except OSError:
            return [None, None]
        ended_run, ended_wait = self._ended
        now: dict[str, tuple[int, int]] = {}
        for task in tasks:
            try:
                with open(self.tasks / task / "schedstat", "rb") as f:
                    fields = f.read().split()
            except OSError:  # a thread that just ended
                continue
            if len(fields) >= 2:
                now[task] = (int(fields[0]), int(fields[1]))
        for task, (run, wait) in self._last.items():
            later = now.get(task)
            if later is None or later[0] < run or later[1] < wait:  # ended (id reused)
                ended_run += run
                ended_wait += wait
        self._last, self._ended = now, (ended_run, ended_wait)
        if not now:
            return [None, None]
        return [
            ended_run + sum(run for run, _ in now.values()),
            ended_wait + sum(wait for _, wait in now.values()),
        ]

    def close(self) -> None:
        pass


class RankSched:
    """Each registered rank of the host: ``rank_run_ns`` and ``rank_wait_ns`` summed
    over its threads, ``rank_main_run_ns`` and ``rank_main_wait_ns`` of its main thread
    (device ``rankR``). Ranks register by a file in the run directory holding their
    pid (``pattern`` finds them); ranks that start later join at a later read, so the
    series grow (the sampler's group takes them as they come, in the same order)."""

    def __init__(self, root: str | os.PathLike[str], run_dir: Path, pattern: str) -> None:
        self.root = root
        self.run_dir = Path(run_dir)
        self.pattern = pattern
        self.series: list[Series] = []
        self._ranks: list[tuple[JobSched, Path]] = []
        self._seen: set[str] = set()

    def _discover(self) -> None:
        for path in sorted(self.run_dir.glob(self.pattern)):
            if path.name in self._seen:
                continue
            rank = path.name[: -len(".pid")].rpartition(".rank-")[2]
            try:
                pid = int(path.read_text(encoding="ascii").strip())
            except (OSError, ValueError):  # half written: read again next time
                continue
            self._seen.add(path.name)
            try:
                sched = JobSched(self.root, pid)
            except OSError:  # gone already, or not visible from here
                continue
            main = Path(self.root, f"proc/{pid}/task/{pid}/schedstat")
            self._ranks.append((sched, main))
            self.series += [
                ("cpu", f"rank{rank}", NO_PORT, c)
                for c in ("rank_run_ns", "rank_wait_ns", "rank_main_run_ns", "rank_main_wait_ns")
            ]

    def read(self) -> Values:
        self._discover()
        out: Values = []
        for sched, main in self._ranks:
            out.extend(sched.read())
            try:
                with open(main, "rb") as f:
                    fields = f.read().split()
                out.extend([int(fields[0]), int(fields[1])])
            except (OSError, ValueError, IndexError):  # the rank has ended
                out.extend([None, None])
        return out

    def close(self) -> None:
        pass


def own_cgroup_dir(
    root: str | os.PathLike[str], proc_cgroup: str, pid: int | None = None
) -> tuple[Path, int, Path] | None:
    """The directory of the CPU controller of the cgroup ``proc_cgroup`` (the text of
    ``/proc/PID/cgroup``) names, its version (2 or 1) and where the cgroup filesystems
    are mounted; None when there is none.

    Looked for under ``/sys/fs/cgroup``, then as each ancestor of process ``pid`` (this
    one for None) sees it (``/proc/PPID/root``), nearest first, then as the first process
    does (``/proc/1/root``): a process started in a network namespace by ``ip netns
    exec`` gets a sysfs of its own, without the cgroup filesystems, and in a container
    the first process's root may not be readable while the parent that started the
    namespace's command is."""
    bases = [
        Path(root, "sys/fs/cgroup"),
        *(Path(root, f"proc/{a}/root/sys/fs/cgroup") for a in _ancestors(root, pid)),
        Path(root, "proc/1/root/sys/fs/cgroup"),
    ]
    for base in bases:
        try:
            found = _cgroup_dir(base, proc_cgroup)
        except OSError:  # another namespace's root may not be ours to read
            continue
        if found is not None:
            return (*found, base)
    return None


#: Ancestors looked through at most: a job's launcher chain is a handful deep.
MAX_ANCESTORS = 32


def _ancestors(root: str | os.PathLike[str], pid: int | None) -> list[int]:
    """The process ids of the ancestors of ``pid`` (this process for None), nearest
    first, the first process left out; as far as their ``status`` files can be read."""
    out: list[int] = []
    current: int | str = pid or "self"
    for _ in range(MAX_ANCESTORS):
        try:
            status = Path(root, f"proc/{current}/status").read_text()
        except OSError:
            break
        ppid = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("PPid:")), "0")
        if not ppid.isdigit() or int(ppid) <= 1:
            break
        current = int(ppid)
        out.append(current)
    return out


def _cgroup_dir(base: Path, proc_cgroup: str) -> tuple[Path, int] | None:
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "" and (base / rel / "cpu.stat").is_file():
            if (base / rel / "cpu.max").is_file() or (base / "cgroup.controllers").is_file():
                return base / rel, 2
        if "cpu" in controllers.split(","):
            for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                path = base / name / rel
                if (path / "cpu.stat").is_file():
                    return path, 1
    return None


class CgroupCpu:
    """The throttling of the sampler's own cgroup at its CPU quota.

    Series (device: the cgroup's path): ``nr_periods``, ``nr_throttled``,
    ``throttled_ns``, ``usage_ns`` (counters) and ``quota_millicpu`` (a gauge: the
    quota in thousandths of a CPU, -1 when unlimited)."""

    COUNTERS = ("nr_periods", "nr_throttled", "throttled_ns", "usage_ns")

    def __init__(self, root: str | os.PathLike[str], pid: int | None = None) -> None:
        own = Path(root, f"proc/{pid or 'self'}/cgroup").read_text()
        found = own_cgroup_dir(root, own, pid)
        if found is None:
            raise FileNotFoundError("no cgroup CPU controller for this process")
        self.path, self.version, mounts = found
        self.stat = PFile(self.path / "cpu.stat")
        self._usage = None
        if self.version == 1:  # cpuacct: mounted with cpu, or on its own
            self._usage = _open(self.path, "cpuacct.usage") or _open(
                mounts / "cpuacct" / _rel(own, "cpuacct"), "cpuacct.usage"
            )
        self._quota = [_open(self.path, n) for n in ("cpu.max", "cpu.cfs_quota_us")]
        self._period = _open(self.path, "cpu.cfs_period_us")
        #: The cgroup as ``/proc/PID/cgroup`` names it (the same in either version).
        self.name = "/" + _rel(own, "cpu" if self.version == 1 else "")
        self.series: list[Series] = [("cgroup", self.name, NO_PORT, c) for c in self.COUNTERS]

    def read(self) -> Values:
        fields = {}
        for line in self.stat.read().splitlines():
            parts = line.split()
            if len(parts) == 2:
                fields[parts[0].decode()] = _int(parts[1])
        if self.version == 2:
            throttled = fields.get("throttled_usec")
            usage = fields.get("usage_usec")
            throttled = None if throttled is None else throttled * 1000
            usage = None if usage is None else usage * 1000
        else:
            throttled = fields.get("throttled_time")
            usage = _read_int(self._usage)
        return [fields.get("nr_periods"), fields.get("nr_throttled"), throttled, usage]

    def quota_millicpu(self) -> int | None:
        cpu_max, cfs_quota = self._quota
        if cpu_max is not None:
            parts = cpu_max.read().split()
            if len(parts) == 2:
                if parts[0] == b"max":
                    return -1
                quota, period = _int(parts[0]), _int(parts[1])
                return None if not quota or not period else quota * 1000 // period
        quota, period = _read_int(cfs_quota), _read_int(self._period)
        if quota is None or not period:
            return None
        return -1 if quota < 0 else quota * 1000 // period

    def close(self) -> None:
        for f in (self.stat, self._usage, self._period, *self._quota):
            if f is not None:
                f.close()


class CgroupQuota:
    """The quota of a :class:`CgroupCpu` as its own series (read with the slow sources:
    it changes when a limit is set, not every tick)."""

    def __init__(self, cgroup: CgroupCpu) -> None:
        self.cgroup = cgroup
        self.series: list[Series] = [("cgroup", cgroup.name, NO_PORT, "quota_millicpu")]

    def read(self) -> Values:
        return [self.cgroup.quota_millicpu()]

    def close(self) -> None:
        pass


def _rel(proc_cgroup: str, controller: str) -> str:
    """The cgroup path of ``controller`` ("" for the unified hierarchy) in the text of
    ``/proc/PID/cgroup``, without its leading slash."""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if (parts[1] == controller == "") or (controller and controller in parts[1].split(",")):
            return parts[2].lstrip("/")
    return ""


def _open(directory: Path, name: str) -> PFile | None:
    try:
        return PFile(directory / name)
    except OSError:
        return None


def _read_int(f: PFile | None) -> int | None:
    if f is None:
        return None
    try:
        return _int(f.read().strip())
    except OSError:
        return None
