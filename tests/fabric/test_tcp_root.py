"""The hosts' congestion control on the real fabric, as root: pinned, read back from
the kernel, and the one a socket opened inside a host gets.

Truth from outside the fabric's code: ``sysctl`` run in each host's namespace, a
namespace made by ``unshare`` for the kernel's default, and ``getsockopt(TCP_CONGESTION)``
on a socket made in the host. Every fabric is torn down by its name in ``finally``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from syncpace.fabric import FabricError, build_spec, tcp
from syncpace.fabric.backend import SystemBackend
from syncpace.fabric.lifecycle import down, existing_namespaces, up
from syncpace.fabric.state import load_state

pytestmark = pytest.mark.root

SOCKET_CC = (
    "import socket; s = socket.socket(); "
    "print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).strip(b'\\0').decode())"
)


def host_choices() -> tuple[str, ...]:
    """What a host may run here (collected on any machine; empty where /proc lacks it)."""
    try:
        return tcp.choices()
    except FabricError:
        return ()


def in_host(namespace: str, *argv: str) -> str:
    out = subprocess.run(
        ["ip", "netns", "exec", namespace, *argv], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def kernel_default() -> str:
    return subprocess.run(
        ["unshare", "-n", "sysctl", "-n", tcp.SYSCTL],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()


def bring_up(name: str, state_dir, **kw):
    values = {"topology": "star", "hosts": 2, "host_rate": "50mbit", "name": name, **kw}
    return up(build_spec(values), SystemBackend(), state_dir)


def check_hosts(state, expected: str) -> None:
    for host in state.fabric.hosts:
        assert in_host(host.namespace, "sysctl", "-n", tcp.SYSCTL) == expected
        assert in_host(host.namespace, sys.executable, "-c", SOCKET_CC) == expected
    assert state.fabric.congestion_control == expected
    assert load_state(state.name, state.directory).fabric.congestion_control == expected


@pytest.mark.parametrize("asked", host_choices())
def test_each_host_runs_the_congestion_control_asked(state_dir, asked):
    name = f"cc{host_choices().index(asked)}{asked[:3]}"
    state = bring_up(name, state_dir, congestion_control=asked)
    try:
        check_hosts(state, asked)
    finally:
        down(state, SystemBackend())
    assert not {ns for ns in existing_namespaces(SystemBackend()) if ns.startswith(f"{name}-")}


def test_without_a_choice_the_hosts_run_the_kernels_default_and_it_is_recorded(state_dir):
    state = bring_up("ccdef", state_dir)
    try:
        check_hosts(state, kernel_default())
        assert load_state("ccdef", state_dir).spec["congestion_control"] == ""
    finally:
        down(state, SystemBackend())
    assert not {ns for ns in existing_namespaces(SystemBackend()) if ns.startswith("ccdef-")}
