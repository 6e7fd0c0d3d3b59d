"""CPU caps for straggler hosts: one cgroup per host, v2 ``cpu.max`` or v1 CFS quota.

Each launcher moves itself into its host's cgroup before it execs the job, so
every rank of that host inherits it; a straggler fault then only rewrites the
quota. Directories are recorded in the fabric state before they are made.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from syncpace.errors import FabricError

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def _is_v2(root: Path) -> bool:
    controllers = root / "cgroup.controllers"
    return controllers.is_file() and "cpu" in controllers.read_text().split()


def base_dir(fabric_name: str, root: Path = ROOT) -> Path:
    """The fabric's parent cgroup (v2 unified hierarchy, else the v1 ``cpu`` one)."""
    if _is_v2(root):
        return root / f"syncpace-{fabric_name}"
    if (root / "cpu" / "cpu.cfs_quota_us").is_file():
        return root / "cpu" / f"syncpace-{fabric_name}"
    raise FabricError(
        f"no cgroup cpu controller under {root} (neither v2 cpu.max nor v1 cpu.cfs_quota_us): "
        "CPU straggler faults are not available on this machine"
    )


def create(path: Path) -> None:
    path.mkdir(exist_ok=True)
    parent = path.parent
    if (parent / "cgroup.subtree_control").is_file() and not (path / "cpu.max").exists():
        # v2: the parent must delegate the cpu controller before children get cpu.max.
        (parent / "cgroup.subtree_control").write_text("+cpu")


def procs_file(path: Path) -> Path:
    return path / "cgroup.procs"


def set_cpu_limit(path: Path, fraction: float | None) -> None:
    """Cap the cgroup at ``fraction`` of one CPU; ``None`` lifts the cap."""
    if fraction is not None and not 0.01 <= fraction <= 64:
        raise FabricError(f"cpu fraction must be in 0.01..64, got {fraction}")
    quota = None if fraction is None else int(fraction * PERIOD_US)
    try:
        if (path / "cpu.max").exists():
            (path / "cpu.max").write_text(f"{'max' if quota is None else quota} {PERIOD_US}")
        else:
            (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(-1 if quota is None else quota))
    except OSError as exc:
        raise FabricError(f"{path}: cannot set the CPU limit: {exc}") from exc


def remove(path: Path, timeout_s: float = 5.0) -> None:
    """Remove a cgroup once its processes are gone (killed ones take a moment to exit)."""
    if not path.exists():
        return
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        remove(child, timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise FabricError(f"{path}: cannot remove cgroup: {exc}") from exc
            time.sleep(0.05)
