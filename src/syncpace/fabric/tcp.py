"""The hosts' TCP congestion control: which the kernel offers, set per host, read back.

A fabric host is a network namespace, and a fresh namespace takes the congestion
control of the namespace that created the first one (the kernel's default, bbr or cubic
depending on the machine), so a run's TCP is a property of the machine unless the
fabric pins it. ``net.ipv4.tcp_congestion_control`` is per network namespace: the
fabric sets it in every host when the spec asks for one, and in every case reads it
back from each host after bring-up, so what the hosts ran is recorded, never inferred.

Which a host may take is the kernel's rule, not only what it has loaded: outside the
initial namespace only a *non-restricted* congestion control can become a namespace's
default (``tcp_set_default_congestion_control`` refuses the others with EPERM), and the
non-restricted ones are ``tcp_allowed_congestion_control`` (at boot: reno and the
kernel's default). So a host can run what is both available and allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

from syncpace.errors import FabricError
from syncpace.fabric.backend import Backend

SYSCTL = "net.ipv4.tcp_congestion_control"
PROC = Path("/proc/sys/net/ipv4")
AVAILABLE = "tcp_available_congestion_control"
ALLOWED = "tcp_allowed_congestion_control"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,15}$")


def listed(key: str, proc: Path | None = None) -> tuple[str, ...]:
    """A space-separated list of congestion controls from ``proc/key``."""
    path = (proc or PROC) / key
    try:
        return tuple(path.read_text().split())
    except OSError as exc:
        raise FabricError(f"{path}: cannot read the kernel's congestion controls: {exc}") from exc


def choices(proc: Path | None = None) -> tuple[str, ...]:
    """What a fabric host may run: available (loaded) and allowed outside the initial
    namespace, in the order the kernel lists them as available."""
    allowed = set(listed(ALLOWED, proc))
    return tuple(name for name in listed(AVAILABLE, proc) if name in allowed)


def check(name: str, proc: Path | None = None) -> None:
    """Raise a one-line :class:`FabricError` unless a host can run ``name`` here."""
    if not _NAME.match(name):
        raise FabricError(f"congestion_control {name!r}: not a congestion control name")
    ok = choices(proc)
    if name in ok:
        return
    offered = " ".join(ok) or "none"
    proc = proc or PROC
    if name not in listed(AVAILABLE, proc):
        raise FabricError(
            f"congestion_control {name!r} is not available here "
            f"({proc / AVAILABLE}); a host can run: {offered}"
        )
    raise FabricError(
        f"congestion_control {name!r} is available but not allowed in a network namespace "
        f"({proc / ALLOWED}); a host can run: {offered}"
    )


def set_argv(namespace: str, name: str) -> tuple[str, ...]:
    return ("ip", "netns", "exec", namespace, "sysctl", "-qw", f"{SYSCTL}={name}")


def read_argv(namespace: str) -> tuple[str, ...]:
    return ("ip", "netns", "exec", namespace, "sysctl", "-n", SYSCTL)


def read_hosts(namespaces: tuple[str, ...], backend: Backend, asked: str = "") -> str:
    """What every host runs, read from each; an error when they differ or when a host
    does not run what was ``asked`` (empty: the kernel's default, whatever it is)."""
    seen = {ns: backend.run(read_argv(ns)).stdout.strip() for ns in namespaces}
    values = set(seen.values())
    if len(values) != 1 or "" in values:
        listed = ", ".join(f"{ns} {cc or '(nothing)'}" for ns, cc in seen.items())
        raise FabricError(f"{SYSCTL}: the hosts do not agree: {listed}")
    (value,) = values
    if asked and value != asked:
        raise FabricError(f"{SYSCTL}: asked {asked}, the hosts run {value}")
    return value
