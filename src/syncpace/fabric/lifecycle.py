"""Bring a fabric up and down through a backend, keeping the state file true."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from syncpace.errors import FabricError
from syncpace.fabric import cgroup, tcp
from syncpace.fabric.backend import Backend
from syncpace.fabric.plan import down_plan, up_plan
from syncpace.fabric.spec import FabricSpec
from syncpace.fabric.state import FabricState, list_fabrics, load_state, state_dir
from syncpace.fabric.topology import build_fabric


def existing_namespaces(backend: Backend) -> set[str]:
    out = backend.run(("ip", "netns", "list")).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def up(spec: FabricSpec, backend: Backend, directory: Path | None = None) -> FabricState:
    """Create the fabric; on any failure remove what was created and re-raise."""
    fabric = build_fabric(spec)
    state = FabricState(
        fabric=fabric,
        spec=dataclasses.asdict(spec),
        directory=directory or state_dir(),
    )
    if state.path.exists():
        raise FabricError(f"a fabric named {fabric.name!r} is already up ({state.path})")
    clash = sorted(set(fabric.namespaces) & existing_namespaces(backend))
    if clash:
        raise FabricError(
            f"namespaces {', '.join(clash)} already exist but no state file records them; "
            f"choose another name or remove them with 'ip netns del'"
        )
    state.save()
    try:
        for command in up_plan(fabric):
            if command.creates:
                state.namespaces.append(command.creates)
                state.save()
            backend.run(command.argv)
        # what the hosts run, asked or the kernel's, read back and recorded
        hosts = tuple(h.namespace for h in fabric.hosts)
        running = tcp.read_hosts(hosts, backend, fabric.congestion_control)
    except BaseException:
        down(state, backend)
        raise
    state.fabric = dataclasses.replace(fabric, congestion_control=running)
    state.complete = True
    state.save()
    return state


def down(state: FabricState, backend: Backend) -> list[str]:
    """Remove what the state records and still exists; return the namespaces removed.

    Idempotent: what is already gone is skipped. Processes still running inside
    the fabric's namespaces were started for it, and are killed first.
    """
    existing = existing_namespaces(backend)
    removed = []
    for command in down_plan(state.namespaces):
        namespace = command.argv[-1]
        if namespace not in existing:
            continue
        pids = backend.run(("ip", "netns", "pids", namespace), check=False).stdout.split()
        for pid in pids:
            backend.kill(int(pid))
        backend.run(command.argv)
        removed.append(namespace)
    for path in reversed(state.cgroups):
        cgroup.remove(Path(path))
    state.delete()
    return removed


def down_named(
    name: str | None, backend: Backend, directory: Path | None = None
) -> tuple[str | None, list[str] | None]:
    """``fabric down [NAME]``: ``(name, namespaces removed)``, or ``(name, None)`` when
    no such fabric is up, which is no error: down is idempotent, and a second
    ``down`` of the same fabric finds nothing left to do."""
    if name is None:
        names = list_fabrics(directory)
        if not names:
            return None, None
        if len(names) > 1:
            raise FabricError(f"several fabrics are up ({', '.join(names)}); name one")
        name = names[0]
    path = (directory or state_dir()) / f"{name}.json"
    if not path.exists():
        return name, None
    return name, down(load_state(name, directory), backend)
