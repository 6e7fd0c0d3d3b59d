"""One launcher per host namespace: environment, command line, and their supervision.

Each launcher runs as ``ip netns exec <host-ns> unshare --uts sh -c …`` so it sees
only its host's ``eth0`` and reports its host name (``h0``, ``h1``…) to the tracer;
when CPU faults are planned it first joins its host's cgroup, so every rank of
the host inherits it. torchrun reads its
multi-node settings from ``PET_*`` variables, so ``torchrun … train.py`` needs no
extra flags; a plain command gets ``RANK``/``WORLD_SIZE`` (one rank per host).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from syncpace.errors import FabricError
from syncpace.fabric import procs
from syncpace.fabric.topology import Fabric, Host

DEFAULT_MASTER_PORT = 29500
#: Placeholders a command may use; replaced per host.
PLACEHOLDERS = ("{node_rank}", "{nnodes}", "{master_addr}", "{master_port}", "{host}")

# Inside the namespace: name the host in a new UTS namespace, then exec the job.
_NAME_HOST = 'echo "$1" > /proc/sys/kernel/hostname && shift && exec "$@"'
# Before entering it (``ip netns exec`` hides /sys/fs/cgroup): join the host's cgroup.
_JOIN_CGROUP = 'echo $$ > "$1" && shift && exec "$@"'


def is_torchrun(command: list[str]) -> bool:
    head = " ".join(command[:3])
    return os.path.basename(command[0]) == "torchrun" or "torch.distributed.run" in head


def host_env(
    fabric: Fabric, host: Host, command: list[str], master_port: int, base: dict[str, str]
) -> dict[str, str]:
    master = fabric.hosts[0].address
    n = len(fabric.hosts)
    env = dict(base)
    env.update(
        {
            "MASTER_ADDR": master,
            "MASTER_PORT": str(master_port),
            "NODE_RANK": str(host.index),
            "GLOO_SOCKET_IFNAME": host.ifname,
            "NCCL_SOCKET_IFNAME": host.ifname,
            "SYNCPACE_FABRIC": fabric.name,
            "SYNCPACE_FABRIC_HOST": host.name,
            # torchrun takes every flag from PET_<FLAG> when the flag is not given.
            "PET_NNODES": str(n),
            "PET_NODE_RANK": str(host.index),
            "PET_MASTER_ADDR": master,
            "PET_MASTER_PORT": str(master_port),
        }
    )
    if not is_torchrun(command):
        env.update(
            {
                "RANK": str(host.index),
                "WORLD_SIZE": str(n),
                "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": "1",
                "GROUP_RANK": str(host.index),
            }
        )
    return env


def substitute(command: list[str], fabric: Fabric, host: Host, master_port: int) -> list[str]:
    values = {
        "{node_rank}": str(host.index),
        "{nnodes}": str(len(fabric.hosts)),
        "{master_addr}": fabric.hosts[0].address,
        "{master_port}": str(master_port),
        "{host}": host.name,
    }
    out = []
    for arg in command:
        for key, value in values.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return out


def launcher_argv(host: Host, command: list[str], cgroup_procs: str = "") -> list[str]:
    argv = [
        "ip",
        "netns",
        "exec",
        host.namespace,
        "unshare",
        "--uts",
        "--",
        "sh",
        "-c",
        _NAME_HOST,
        "syncpace-fabric",
        host.name,
        *command,
    ]
    if cgroup_procs:
        argv = ["sh", "-c", _JOIN_CGROUP, "syncpace-fabric", cgroup_procs, *argv]
    return argv


@dataclass(frozen=True, slots=True)
class JobResult:
    returncodes: dict[str, int | None]  # host → exit code (None: killed by us)
    elapsed_s: float
    timed_out: bool
    reason: str  # why the job ended: "completed", "failed on h2", "timeout", "interrupted"

    @property
    def returncode(self) -> int:
        if self.timed_out:
            return 124
        for code in self.returncodes.values():
            if code:
                return code
        return 0 if all(c == 0 for c in self.returncodes.values()) else 1


class Job:
    """The launchers of one run, their output, and a bounded end."""

    def __init__(self, log_dir: Path, echo: IO[str] | None = sys.stdout) -> None:
        self.log_dir = log_dir
        self.echo = echo
        self.procs: dict[str, subprocess.Popen] = {}
        self._pumps: list[threading.Thread] = []
        self._echo_lock = threading.Lock()
        self.stopped = threading.Event()

    def start(self, host: str, argv: list[str], env: dict[str, str]) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # one process group per launcher, killable as one
            )
        except OSError as exc:
            raise FabricError(f"cannot start the launcher of {host}: {exc}") from exc
        self.procs[host] = proc
        pump = threading.Thread(target=self._pump, args=(host, proc), daemon=True)
        pump.start()
        self._pumps.append(pump)

    def _pump(self, host: str, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        with proc.stdout, open(self.log_dir / f"{host}.log", "wb") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if self.echo is not None:
                    with self._echo_lock:
                        self.echo.write(f"[{host}] {line.decode(errors='replace')}")
                        self.echo.flush()

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def wait(self, timeout_s: float, grace_s: float) -> JobResult:
        """Wait for every launcher; once one fails the others get ``grace_s`` to end
        (a dead rank leaves its peers blocked in a collective), then are killed."""
        start = time.monotonic()
        deadline = start + timeout_s
        reason = "completed"
        timed_out = False
        while True:
            codes = {h: p.poll() for h, p in self.procs.items()}
            if all(c is not None for c in codes.values()):
                break
            failed = [h for h, c in codes.items() if c not in (None, 0)]
            if failed and reason == "completed":
                reason = f"failed on {', '.join(failed)}"
                deadline = min(deadline, time.monotonic() + grace_s)
            if self.stopped.is_set():
                reason = "interrupted"
                break
            if time.monotonic() > deadline:
                timed_out = reason == "completed"
                reason = "timeout" if timed_out else reason
                break
            time.sleep(0.05)
        failed = [h for h, p in self.procs.items() if p.returncode not in (None, 0)]
        if failed and reason == "completed":
            reason = f"failed on {', '.join(failed)}"
        killed = {h for h, p in self.procs.items() if p.poll() is None}
        self.kill()
        for pump in self._pumps:
            pump.join(timeout=5)
        codes = {h: (None if h in killed else p.returncode) for h, p in self.procs.items()}
        return JobResult(codes, time.monotonic() - start, timed_out, reason)

    def kill(self, grace_s: float = 3.0) -> None:
        """SIGTERM every launcher tree (lets tracers flush), SIGKILL what is left."""
        live = [p for p in self.procs.values() if p.poll() is None]
        for proc in live:
            procs.kill_tree(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in live:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                procs.kill_tree(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
