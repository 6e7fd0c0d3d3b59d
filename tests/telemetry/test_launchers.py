"""A rank's node and local place from each launcher's variables.

The environments below are what each launcher sets in a rank's process: torchrun's
elastic agent; PyTorch Lightning's ``_SubprocessScriptLauncher`` (``NODE_RANK``,
``LOCAL_RANK``, ``WORLD_SIZE`` only) and ``fabric run`` (``LT_DEVICES``,
``LT_NUM_NODES``); ``srun``; ``mpirun``.
"""

from __future__ import annotations

import pytest

from syncpace.telemetry.host import rank_facts
from syncpace.telemetry.launchers import LaunchPlace, launch_place

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "job-7",
    "GROUP_RANK": "1",
    "LOCAL_RANK": "2",
    "LOCAL_WORLD_SIZE": "4",
    "RANK": "6",
    "WORLD_SIZE": "8",
}
# node 2 of 3, 4 processes per node: rank 2 * 4 + 3 = 11
LIGHTNING = {"NODE_RANK": "2", "LOCAL_RANK": "3", "WORLD_SIZE": "12", "MASTER_PORT": "29500"}
SLURM = {
    "SLURM_JOB_ID": "99",
    "SLURM_NODEID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_PROCID": "4",
    "SLURM_NTASKS": "6",
    "SLURM_TASKS_PER_NODE": "4,2",
}


@pytest.mark.parametrize(
    ("env", "rank", "expected"),
    [
        (TORCHRUN, 6, LaunchPlace("torchrun", 1, 2, 4)),
        (LIGHTNING, 11, LaunchPlace("lightning", 2, 3, 4)),
        # the first node cannot tell its processes per node from its ranks alone
        (
            {**LIGHTNING, "NODE_RANK": "0", "LOCAL_RANK": "1"},
            1,
            LaunchPlace("lightning", 0, 1, None),
        ),
        # fabric run says it
        (
            {"NODE_RANK": "0", "LOCAL_RANK": "1", "LT_DEVICES": "2", "LT_NUM_NODES": "2"},
            1,
            LaunchPlace("lightning", 0, 1, 2),
        ),
        (SLURM, 4, LaunchPlace("slurm", 1, 0, 2)),
        (
            {**SLURM, "SLURM_TASKS_PER_NODE": "3(x2)", "SLURM_NODEID": "0"},
            0,
            LaunchPlace("slurm", 0, 0, 3),
        ),
        ({**SLURM, "SLURM_NTASKS_PER_NODE": "5"}, 4, LaunchPlace("slurm", 1, 0, 5)),
        (
            {"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"},
            9,
            LaunchPlace("mpi", None, 1, 8),
        ),
        ({"LOCAL_RANK": "0"}, 0, LaunchPlace(None, None, 0, None)),
        ({}, 0, LaunchPlace(None, None, None, None)),
    ],
)
def test_each_launcher_gives_the_rank_its_place(
    env: dict[str, str], rank: int, expected: LaunchPlace
) -> None:
    assert launch_place(env, rank) == expected


def test_the_innermost_launcher_wins() -> None:
    # torchrun started by srun: one SLURM task, four torchrun workers on the node
    assert launch_place({**SLURM, **TORCHRUN}, 6) == LaunchPlace("torchrun", 1, 2, 4)
    # Lightning's launcher inside an interactive allocation
    assert launch_place({**SLURM, **LIGHTNING}, 11) == LaunchPlace("lightning", 2, 3, 4)


def test_a_rank_past_its_node_is_not_read_as_a_layout() -> None:
    # rank 5, local rank 3 on node 1: 2 per node would leave local rank 3 off the node
    assert launch_place({"NODE_RANK": "1", "LOCAL_RANK": "3"}, 5).local_world_size is None


def test_garbled_values_are_unknown() -> None:
    env = {**SLURM, "SLURM_TASKS_PER_NODE": "four", "SLURM_NODEID": "-1"}
    assert launch_place(env, 4) == LaunchPlace("slurm", None, 0, None)


def test_the_metadata_of_a_lightning_rank_carries_its_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("GROUP_RANK", "TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE", "SLURM_LOCALID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in LIGHTNING.items():
        monkeypatch.setenv(name, value)
    facts = rank_facts(11, 12, "cpu")
    assert (facts["node_rank"], facts["local_rank"], facts["local_world_size"]) == (2, 3, 4)
