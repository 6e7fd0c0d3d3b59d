"""Which job a rank belongs to: an id every rank agrees on, from the rendezvous.

Nodes of one job may write their traces into directories of their own (no shared
filesystem); the id in every rank's metadata is what says those directories are one
job. It is agreed through the job's own store, the one ``init_process_group``
rendezvoused on: rank 0 draws a fresh id and publishes it, every other rank reads it
(a bounded wait). That holds whatever the launcher (torchrun with any rendezvous,
SLURM ``srun``, a hand-written launcher), and tells two runs with the same launcher
run id apart. ``SYNCPACE_JOB_ID`` overrides it. Without a usable store the launcher's
ids stand in (``TORCHELASTIC_RUN_ID`` unless it is torchrun's default ``none``, then
``SLURM_JOB_ID``.``SLURM_STEP_ID``), and without those the id stays unknown.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from typing import Any

from syncpace.capture.log import warn_once

#: Launcher facts kept in the metadata (``launcher``), when set.
LAUNCHER_VARIABLES = (
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "GROUP_RANK",
    "NODE_RANK",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_NODEID",
    "SLURM_PROCID",
)


def launcher_facts() -> dict[str, str]:
    return {name: os.environ[name] for name in LAUNCHER_VARIABLES if os.environ.get(name)}


def _launcher_id() -> tuple[str | None, str]:
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return f"torchelastic:{run_id}", "TORCHELASTIC_RUN_ID"
    slurm = os.environ.get("SLURM_JOB_ID")
    if slurm:
        return f"slurm:{slurm}.{os.environ.get('SLURM_STEP_ID', '0')}", "SLURM_JOB_ID"
    return None, "unknown"


def agree_job_id(store: Any, rank: int, timeout_s: float) -> tuple[str | None, str]:
    """The job id and where it came from (``SYNCPACE_JOB_ID``, ``store``, a launcher
    variable, or ``unknown``). Never raises; waits at most ``timeout_s``."""
    explicit = os.environ.get("SYNCPACE_JOB_ID")
    if explicit:
        return explicit, "SYNCPACE_JOB_ID"
    if store is not None:
        # one key per attempt: an elastic restart must not read the last attempt's id
        key = f"syncpace/job_id/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        try:
            if rank == 0:
                job_id = uuid.uuid4().hex
                store.set(key, job_id)
                return job_id, "store"
            store.wait([key], timedelta(seconds=timeout_s))
            return bytes(store.get(key)).decode(), "store"
        except Exception as exc:  # the store is the job's: never fail it
            warn_once("job_id", "no job id from the rendezvous store (%s)", exc)
    return _launcher_id()
