"""The state file: what a fabric is and what of it may exist on this machine.

Each resource is recorded *before* it is created, and the file is replaced
atomically, so after a crash at any point the file lists a superset of what
exists and ``down`` removes exactly that (skipping what was never made).
The default directory is on ``/run``, which is cleared at boot like the
namespaces themselves.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syncpace.errors import FabricError
from syncpace.fabric.topology import Fabric

STATE_DIR_ENV = "SYNCPACE_FABRIC_STATE_DIR"
DEFAULT_STATE_DIR = "/run/syncpace/fabric"


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


@dataclass
class FabricState:
    fabric: Fabric
    spec: dict[str, Any]
    namespaces: list[str] = field(default_factory=list)  # recorded before creation
    cgroups: list[str] = field(default_factory=list)  # directories, recorded before mkdir
    complete: bool = False  # every command of up succeeded
    created_ns: int = field(default_factory=time.time_ns)
    directory: Path = field(default_factory=state_dir)

    @property
    def name(self) -> str:
        return self.fabric.name

    @property
    def path(self) -> Path:
        return self.directory / f"{self.name}.json"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "spec": self.spec,
            "fabric": self.fabric.to_json(),
            "namespaces": self.namespaces,
            "cgroups": self.cgroups,
            "complete": self.complete,
            "created_ns": self.created_ns,
        }

    def save(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.to_json(), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


def load_state(name: str, directory: Path | None = None) -> FabricState:
    directory = directory or state_dir()
    path = directory / f"{name}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        known = ", ".join(list_fabrics(directory)) or "none"
        raise FabricError(
            f"no fabric named {name!r} (state in {directory}; known: {known})"
        ) from exc
    except (OSError, ValueError) as exc:
        raise FabricError(f"{path}: unreadable state file: {exc}") from exc
    return FabricState(
        fabric=Fabric.from_json(data["fabric"]),
        spec=data.get("spec", {}),
        namespaces=list(data.get("namespaces", [])),
        cgroups=list(data.get("cgroups", [])),
        complete=bool(data.get("complete", False)),
        created_ns=int(data.get("created_ns", 0)),
        directory=directory,
    )


def list_fabrics(directory: Path | None = None) -> list[str]:
    directory = directory or state_dir()
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.json"))


def resolve_name(name: str | None, directory: Path | None = None) -> str:
    """The named fabric, or the only one when none is named."""
    if name:
        return name
    names = list_fabrics(directory)
    if len(names) == 1:
        return names[0]
    if not names:
        raise FabricError("no fabric is up (syncpace fabric up …)")
    raise FabricError(f"several fabrics are up ({', '.join(names)}); name one")
