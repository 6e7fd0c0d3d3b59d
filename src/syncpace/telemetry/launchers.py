"""Where a rank sits on its node, as the launcher that started it says.

Each launcher names a rank's node and local place with variables of its own:

- torchrun (torch elastic): ``GROUP_RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``;
- PyTorch Lightning's launcher (``Trainer``/``Fabric`` starting the processes of a node
  itself): ``NODE_RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and no local world size;
  ``fabric run`` adds ``LT_DEVICES`` (processes per node); its ranks are laid out as
  ``node_rank * processes_per_node + local_rank``, so a rank on a node past the first
  gives the processes per node away;
- SLURM's ``srun``: ``SLURM_NODEID``, ``SLURM_LOCALID``, ``SLURM_NTASKS_PER_NODE`` (when
  ``--ntasks-per-node`` was given) or ``SLURM_TASKS_PER_NODE`` (``"4(x2),2"``: the
  count of every node, in node order);
- Open MPI's ``mpirun``: ``OMPI_COMM_WORLD_LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_SIZE``.

The innermost launcher wins, one launcher for all three facts: torchrun, then
Lightning, then SLURM, then MPI. torchrun or Lightning started under ``srun`` start
several processes from one SLURM task, so SLURM's local id would be 0 on all of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchPlace:
    """A rank's node and local place; ``None`` where its launcher does not say."""

    launcher: str | None
    node_rank: int | None
    local_rank: int | None
    local_world_size: int | None


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    return int(value) if value.isdigit() else None


def _slurm_tasks_on(spec: str, node: int | None) -> int | None:
    """Tasks on node ``node`` from ``SLURM_TASKS_PER_NODE`` (``"4(x2),2"``)."""
    counts: list[int] = []
    for part in spec.split(","):
        found = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if found is None:
            return None
        counts += [int(found[1])] * int(found[2] or 1)
    if len(set(counts)) == 1:  # the same on every node: no node index needed
        return counts[0]
    if node is None or node >= len(counts):
        return None
    return counts[node]


def _torchrun(env: Mapping[str, str], rank: int | None) -> LaunchPlace | None:
    if "GROUP_RANK" not in env and "TORCHELASTIC_RUN_ID" not in env:
        return None
    return LaunchPlace(
        "torchrun", _int(env, "GROUP_RANK"), _int(env, "LOCAL_RANK"), _int(env, "LOCAL_WORLD_SIZE")
    )


def _lightning(env: Mapping[str, str], rank: int | None) -> LaunchPlace | None:
    node = _int(env, "NODE_RANK")
    if node is None:
        return None
    local = _int(env, "LOCAL_RANK")
    size = _int(env, "LT_DEVICES")
    if size is None and rank is not None and local is not None and node > 0:
        per_node, rest = divmod(rank - local, node)
        size = per_node if rest == 0 and per_node > local else None
    return LaunchPlace("lightning", node, local, size)


def _slurm(env: Mapping[str, str], rank: int | None) -> LaunchPlace | None:
    if "SLURM_LOCALID" not in env:
        return None
    node = _int(env, "SLURM_NODEID")
    size = _int(env, "SLURM_NTASKS_PER_NODE")
    if size is None and env.get("SLURM_TASKS_PER_NODE"):
        size = _slurm_tasks_on(env["SLURM_TASKS_PER_NODE"], node)
    return LaunchPlace("slurm", node, _int(env, "SLURM_LOCALID"), size)


def _mpi(env: Mapping[str, str], rank: int | None) -> LaunchPlace | None:
    if "OMPI_COMM_WORLD_LOCAL_RANK" not in env:
        return None
    local = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK")
    return LaunchPlace("mpi", None, local, _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE"))


#: The launchers in order of precedence (the module's docstring says why).
LAUNCHERS = (_torchrun, _lightning, _slurm, _mpi)


def launch_place(env: Mapping[str, str], rank: int | None = None) -> LaunchPlace:
    """Where ``rank`` sits, from the first launcher in :data:`LAUNCHERS` whose variables
    ``env`` holds; with none, only ``LOCAL_RANK`` (a hand-set environment) is read."""
    for launcher in LAUNCHERS:
        place = launcher(env, rank)
        if place is not None:
            return place
    return LaunchPlace(None, None, _int(env, "LOCAL_RANK"), _int(env, "LOCAL_WORLD_SIZE"))
