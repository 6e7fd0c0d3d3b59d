"""``fabric run``: a job across the fabric, with counters, faults and a bounded end.

The run directory receives the trace (when traced), ``fabric.json`` (the fabric),
``fabric-links.arrow`` (counters), ``fabric-faults.jsonl`` (what was injected
when), ``fabric-run.json`` (how the run ended) and ``fabric-logs/<host>.log``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from syncpace.errors import FabricError
from syncpace.fabric import cgroup
from syncpace.fabric.backend import Backend
from syncpace.fabric.counters import Sampler
from syncpace.fabric.faults import Context, Fault, Scheduler, check_against
from syncpace.fabric.launch import (
    DEFAULT_MASTER_PORT,
    Job,
    JobResult,
    host_env,
    launcher_argv,
    substitute,
)
from syncpace.fabric.state import FabricState

FABRIC_FILE = "fabric.json"
FAULTS_FILE = "fabric-faults.jsonl"
RESULT_FILE = "fabric-run.json"


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    timeout_s: float = 600.0
    grace_s: float = 10.0
    sample_interval_s: float = 0.5
    master_port: int = DEFAULT_MASTER_PORT
    faults: list[Fault] = field(default_factory=list)


def run_job(
    state: FabricState,
    command: list[str],
    run_dir: Path,
    backend: Backend,
    options: RunOptions,
    base_env: dict[str, str] | None = None,
    echo: IO[str] | None = sys.stdout,
) -> JobResult:
    fabric = state.fabric
    check_against(options.faults, fabric)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / FABRIC_FILE).write_text(json.dumps(fabric.to_json(), indent=1))
    (run_dir / FAULTS_FILE).write_text("")
    host_cgroups = _make_cgroups(state, options.faults)
    env = dict(os.environ if base_env is None else base_env)
    job = Job(run_dir / "fabric-logs", echo=echo)
    sampler = Sampler(fabric, backend, run_dir, options.sample_interval_s)
    ctx = Context(
        fabric=fabric,
        backend=backend,
        launcher_pids=job.pids,
        host_cgroups=host_cgroups,
        host_pids=lambda host: job.procs[host].pid if host in job.procs else None,
        run_seconds=options.timeout_s,
    )
    scheduler = Scheduler(options.faults, ctx, run_dir / FAULTS_FILE)
    # Signals can be caught only on the main thread; elsewhere the caller owns them.
    on_main = threading.current_thread() is threading.main_thread()
    signals = (signal.SIGINT, signal.SIGTERM) if on_main else ()
    previous = {sig: signal.getsignal(sig) for sig in signals}

    def interrupt(_signum: int, _frame: object) -> None:
        job.stopped.set()

    started = time.time_ns()
    result: JobResult | None = None
    try:
        for sig in previous:
            signal.signal(sig, interrupt)
        sampler.start()
        for host in fabric.hosts:
            argv = substitute(command, fabric, host, options.master_port)
            procs_file = str(cgroup.procs_file(host_cgroups[host.name])) if host_cgroups else ""
            job.start(
                host.name,
                launcher_argv(host, argv, procs_file),
                host_env(fabric, host, argv, options.master_port, env),
            )
        scheduler.start()
        result = job.wait(options.timeout_s, options.grace_s)
    finally:
        job.kill()
        scheduler.stop()
        sampler.stop()
        for path in {p.parent for p in host_cgroups.values()}:
            cgroup.remove(path)  # the fabric's cgroup and its hosts' below it
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        summary = {
            "fabric": fabric.name,
            "command": command,
            "started_ns": started,
            "finished_ns": time.time_ns(),
            "faults": [str(f) for f in options.faults],
            "counter_samples": sampler.samples,
            "counter_error": sampler.error,
            "result": None if result is None else asdict(result),
        }
        (run_dir / RESULT_FILE).write_text(json.dumps(summary, indent=1))
    return result


def _make_cgroups(state: FabricState, faults: list[Fault]) -> dict[str, Path]:
    """One CPU cgroup per host, only when a straggler fault needs them."""
    if not any(f.action == "straggler" for f in faults):
        return {}
    base = cgroup.base_dir(state.name)
    paths = {h.name: base / h.name for h in state.fabric.hosts}
    for path in (base, *paths.values()):
        if str(path) not in state.cgroups:
            state.cgroups.append(str(path))
    state.save()
    try:
        cgroup.create(base)
        for path in paths.values():
            cgroup.create(path)
    except OSError as exc:
        raise FabricError(f"cannot create the CPU cgroups for straggler faults: {exc}") from exc
    return paths
