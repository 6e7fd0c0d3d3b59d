"""Scenario files (TOML, or YAML when PyYAML is installed) for repeatable studies.

A file has an optional ``name`` and ``description`` and one table per section of
:class:`~syncpace.sim.engine.SimConfig` (``topology``, ``workload``, ``noise``,
``network``, ``interference``, ``pacing``, ``run``), plus ``study`` (``nodes``: the
scales of a scaling study, ``pace``: run every scale with pacing too) and
``calibration`` (``file``: a bench JSON or a trace directory, relative to the file).
Unknown sections and keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncpace.control.policy import PacingConfig
from syncpace.errors import ConfigError, ScenarioError
from syncpace.sim.engine import RunSpec, SimConfig
from syncpace.sim.interference import InterferenceSpec
from syncpace.sim.network import NetworkSpec
from syncpace.sim.noise import NoiseSpec
from syncpace.sim.topology import TopologySpec
from syncpace.sim.workload import WorkloadSpec

SECTIONS: dict[str, type] = {
    "topology": TopologySpec,
    "workload": WorkloadSpec,
    "noise": NoiseSpec,
    "network": NetworkSpec,
    "interference": InterferenceSpec,
    "pacing": PacingConfig,
    "run": RunSpec,
}


@dataclass(frozen=True)
class Scenario:
    config: SimConfig
    description: str = ""
    study_nodes: tuple[int, ...] = ()
    study_pace: bool = False
    calibration: str | None = None
    path: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.config.name,
            "description": self.description,
            "study": {"nodes": list(self.study_nodes), "pace": self.study_pace},
            "config": self.config.to_json(),
        }


def load(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read the scenario file ({exc.strerror or exc})") from exc
    data = _parse(p, text)
    return from_dict(data, source=str(p), base=p.parent)


def _parse(p: Path, text: str) -> dict[str, Any]:
    if p.suffix in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError as exc:
            raise ScenarioError(f"{p}: YAML scenarios need PyYAML (pip install pyyaml)") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ScenarioError(f"{p}: not valid YAML ({exc})") from exc
    else:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            try:
                import tomli as tomllib  # type: ignore[no-redef]
            except ImportError as exc:
                raise ScenarioError(f"{p}: TOML on Python 3.10 needs tomli") from exc
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ScenarioError(f"{p}: not valid TOML ({exc})") from exc
    if not isinstance(data, dict):
        raise ScenarioError(f"{p}: a scenario is a table of sections")
    return data


def from_dict(data: dict[str, Any], source: str = "scenario", base: Path | None = None) -> Scenario:
    data = dict(data)
    name = str(data.pop("name", Path(source).stem))
    description = str(data.pop("description", ""))
    study = data.pop("study", {}) or {}
    calibration = data.pop("calibration", {}) or {}
    sections: dict[str, Any] = {}
    for key, values in data.items():
        if key not in SECTIONS:
            known = ", ".join([*SECTIONS, "study", "calibration", "name", "description"])
            raise ScenarioError(f"{source}: unknown section [{key}] (known: {known})")
        if not isinstance(values, dict):
            raise ScenarioError(f"{source}: [{key}] must be a table")
        sections[key] = build(SECTIONS[key], values, f"{source} [{key}]")
    pacing = sections.pop("pacing", None)
    config = SimConfig(name=name, pacing=pacing, **sections)
    nodes = study.get("nodes", ())
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(n, int) and n > 0 for n in nodes):
        raise ScenarioError(f"{source} [study]: nodes must be a list of positive integers")
    extra = set(study) - {"nodes", "pace"} or set(calibration) - {"file"}
    if extra:
        raise ScenarioError(f"{source}: unknown keys {sorted(extra)} in [study]/[calibration]")
    cal = calibration.get("file")
    if cal is not None and base is not None and not Path(cal).is_absolute():
        cal = str(base / cal)
    return Scenario(config, description, tuple(nodes), bool(study.get("pace", False)), cal, source)


def build(cls: type, values: dict[str, Any], where: str) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ScenarioError(f"{where}: unknown keys {unknown} (known: {', '.join(names)})")
    clean = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    for key, value in clean.items():
        default = names[key].default
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ScenarioError(f"{where}: {key} must be true or false, got {value!r}")
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ScenarioError(f"{where}: {key} must be a number, got {value!r}")
            if isinstance(default, float):
                clean[key] = float(value)
        if isinstance(default, str) and not isinstance(value, str):
            raise ScenarioError(f"{where}: {key} must be a string, got {value!r}")
    try:
        return cls(**clean)
    except ConfigError as exc:
        raise ScenarioError(f"{where}: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"{where}: {exc}") from exc


def override(config: SimConfig, assignments: list[str]) -> SimConfig:
    """Apply ``section.key=value`` assignments (values parsed as TOML scalars/arrays)."""
    import tomllib

    changes: dict[str, dict[str, Any]] = {}
    for item in assignments:
        path, sep, raw = item.partition("=")
        section, dot, key = path.strip().partition(".")
        if not sep or not dot or section not in SECTIONS:
            raise ScenarioError(
                f"--set {item!r}: expected SECTION.KEY=VALUE, SECTION one of {', '.join(SECTIONS)}"
            )
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()  # a bare word is a string
        changes.setdefault(section, {})[key.strip()] = value
    for section, values in changes.items():
        current = getattr(config, section)
        if current is None:  # pacing not configured yet
            current = SECTIONS[section]()
        merged = {f.name: getattr(current, f.name) for f in dataclasses.fields(current)}
        merged.update(values)
        config = config.replace(**{section: build(SECTIONS[section], merged, f"--set {section}")})
    return config
