"""Who executes the plan: the system's ``ip``/``tc``, or a recorder for tests without root."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from syncpace.errors import FabricError

COMMAND_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


class Backend(Protocol):
    def run(self, argv: Sequence[str], *, check: bool = True) -> Result: ...

    def kill(self, pid: int) -> None: ...


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise FabricError(
            f"{what} needs root (it creates network namespaces and qdiscs); "
            "run it as root, e.g. sudo syncpace fabric …"
        )


class SystemBackend:
    """Runs commands for real; every command is bounded by a timeout."""

    def __init__(self, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        for tool, package in (("ip", "iproute2"), ("tc", "iproute2")):
            if shutil.which(tool) is None:
                raise FabricError(f"'{tool}' not found on PATH; install {package}")

    def run(self, argv: Sequence[str], *, check: bool = True) -> Result:
        text = " ".join(argv)
        try:
            proc = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=self.timeout_s, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise FabricError(f"'{text}' did not finish within {self.timeout_s:g} s") from exc
        except OSError as exc:
            raise FabricError(f"'{text}' could not start: {exc}") from exc
        result = Result(proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            hint = ""
            if "Operation not permitted" in proc.stderr or "Permission denied" in proc.stderr:
                hint = " (are you root?)"
            raise FabricError(f"'{text}' failed: {proc.stderr.strip() or proc.returncode}{hint}")
        return result

    def kill(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@dataclass
class RecordingBackend:
    """Records commands instead of running them, and plays a plausible kernel.

    It tracks namespaces added and deleted so ``ip netns list`` answers like the
    real one; ``fail_at`` makes the n-th command (0-based) fail, to rehearse a
    crash half-way through ``up``; ``responses`` answers other queries by prefix. A
    namespace's ``sysctl`` of the TCP congestion control reads what was written to it,
    or ``congestion_control`` (the kernel's default here) before that.
    """

    fail_at: int | None = None
    responses: dict[str, str] = field(default_factory=dict)
    pids: dict[str, list[int]] = field(default_factory=dict)
    on_run: Callable[[tuple[str, ...]], None] | None = None
    commands: list[tuple[str, ...]] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    congestion_control: str = "cubic"
    sysctls: dict[str, str] = field(default_factory=dict)  # namespace -> congestion control

    def run(self, argv: Sequence[str], *, check: bool = True) -> Result:
        argv = tuple(argv)
        if self.fail_at is not None and len(self.commands) == self.fail_at:
            self.commands.append(argv)
            if check:
                raise FabricError(f"'{' '.join(argv)}' failed: injected failure")
            return Result(1, "", "injected failure")
        self.commands.append(argv)
        if self.on_run is not None:
            self.on_run(argv)
        if argv[:3] == ("ip", "netns", "add"):
            if argv[3] in self.namespaces:
                return self._fail(argv, f'Cannot create namespace "{argv[3]}": exists', check)
            self.namespaces.append(argv[3])
        elif argv[:3] == ("ip", "netns", "del"):
            if argv[3] not in self.namespaces:
                return self._fail(argv, f'Cannot remove namespace "{argv[3]}"', check)
            self.namespaces.remove(argv[3])
        elif argv[:3] == ("ip", "netns", "list"):
            return Result(0, "".join(f"{ns}\n" for ns in self.namespaces), "")
        elif argv[:3] == ("ip", "netns", "pids"):
            return Result(0, "".join(f"{p}\n" for p in self.pids.get(argv[3], [])), "")
        elif argv[:3] == ("ip", "netns", "exec") and argv[4:5] == ("sysctl",):
            return self._sysctl(argv)
        text = " ".join(argv)
        for prefix, out in self.responses.items():
            if text.startswith(prefix):
                return Result(0, out, "")
        return Result(0, "", "")

    def _sysctl(self, argv: tuple[str, ...]) -> Result:
        namespace, setting = argv[3], argv[-1]
        if "=" in setting:
            self.sysctls[namespace] = setting.split("=", 1)[1]
            return Result(0, "", "")
        return Result(0, self.sysctls.get(namespace, self.congestion_control) + "\n", "")

    def _fail(self, argv: tuple[str, ...], message: str, check: bool) -> Result:
        if check:
            raise FabricError(f"'{' '.join(argv)}' failed: {message}")
        return Result(1, "", message)

    def kill(self, pid: int) -> None:
        self.killed.append(pid)

    def strings(self) -> list[str]:
        return [" ".join(c) for c in self.commands]
