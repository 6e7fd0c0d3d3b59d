"""Scenario files (TOML, or YAML when PyYAML is installed) for repeatable studies.

A file has an optional ``name`` and ``description`` and one table per section of
:class:`~syncpace.sim.engine.SimConfig` (``topology``, ``workload``, ``noise``,
``network``, ``interference``, ``pacing``, ``run``), plus ``study`` (``nodes``: the
scales of a scaling study; every scale runs paced too when ``[pacing] strategy`` is
``early`` or ``target``; ``pacing_on``: the places of the pacer's delay to run a paced
arm of, e.g. ``["device", "host"]``) and ``calibration`` (``file``: a bench JSON or a trace
directory, relative to the file). Unknown sections and keys are errors, so a typo never
silently falls back to a default; every value is checked for its type and range, and an
error names the file, the section and the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncpace.config import number_kind, parse_toml, read_text, toml_value
from syncpace.control.config import PacingConfig
from syncpace.errors import ConfigError, ScenarioError
from syncpace.sim.engine import RunSpec, SimConfig
from syncpace.sim.interference import InterferenceSpec
from syncpace.sim.network import NetworkSpec
from syncpace.sim.noise import NoiseSpec
from syncpace.sim.topology import TopologySpec
from syncpace.sim.workload import PLACEMENTS, WorkloadSpec

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
    calibration: str | None = None
    path: str | None = None
    study_pacing_on: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.config.name,
            "description": self.description,
            "study": {"nodes": list(self.study_nodes), "pacing_on": list(self.study_pacing_on)},
            "config": self.config.to_json(),
        }


def load(path: str | Path) -> Scenario:
    p = Path(path)
    data = _parse(p, read_text(p, ScenarioError))
    return from_dict(data, source=str(p), base=p.parent)


def _parse(p: Path, text: str) -> dict[str, Any]:
    if p.suffix in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError as exc:
            raise ScenarioError(f"{p}: YAML scenarios need PyYAML (pip install pyyaml)") from exc
        try:
            data = yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError) as exc:
            raise ScenarioError(f"{p}: not valid YAML ({exc})") from None
    else:
        data = parse_toml(text, str(p), ScenarioError)
    if not isinstance(data, dict):
        raise ScenarioError(f"{p}: a scenario is a table of sections")
    return data


def from_dict(data: dict[str, Any], source: str = "scenario", base: Path | None = None) -> Scenario:
    data = dict(data)
    name = data.pop("name", Path(source).stem)
    description = data.pop("description", "")
    for key, value in (("name", name), ("description", description)):
        if not isinstance(value, str):
            raise ScenarioError(f"{source}: {key} must be a string, got {value!r}")
    study = _table(data.pop("study", {}), f"{source} [study]")
    calibration = _table(data.pop("calibration", {}), f"{source} [calibration]")
    sections: dict[str, Any] = {}
    for key, values in data.items():
        if key not in SECTIONS:
            known = ", ".join([*SECTIONS, "study", "calibration", "name", "description"])
            raise ScenarioError(f"{source}: unknown section [{key}] (known: {known})")
        where = f"{source} [{key}]"
        sections[key] = build(SECTIONS[key], _table(values, where), where)
    config = SimConfig(name=name, **sections)
    if "pace" in study:
        raise ScenarioError(
            f"{source} [study]: 'pace' is gone: a study runs every scale paced too when "
            "[pacing] strategy is early or target"
        )
    extra = sorted(set(study) - {"nodes", "pacing_on"}) or sorted(set(calibration) - {"file"})
    if extra:
        raise ScenarioError(f"{source}: unknown keys {extra} in [study]/[calibration]")
    nodes = study.get("nodes", [])
    limit = TopologySpec.MAX_NODES
    if not isinstance(nodes, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and 0 < n <= limit for n in nodes
    ):
        raise ScenarioError(
            f"{source} [study] nodes: must be a list of integers in 1..{limit}, got {nodes!r}"
        )
    places = _placements(study, source)
    cal = calibration.get("file")
    if cal is not None and not isinstance(cal, str):
        raise ScenarioError(f"{source} [calibration] file: must be a path, got {cal!r}")
    if cal is not None and base is not None and not Path(cal).is_absolute():
        cal = str(base / cal)
    return Scenario(config, description, tuple(nodes), cal, source, places)


def _placements(study: dict[str, Any], source: str) -> tuple[str, ...]:
    """``[study] pacing_on``: a non-empty list of places of the pacer's delay, each once."""
    if "pacing_on" not in study:
        return ()
    places = study["pacing_on"]
    if not isinstance(places, list) or not places or not all(p in PLACEMENTS for p in places):
        raise ScenarioError(
            f"{source} [study] pacing_on: must be a list of {', '.join(PLACEMENTS)}, got {places!r}"
        )
    return tuple(dict.fromkeys(places))


def _table(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ScenarioError(f"{where}: must be a table, got {value!r}")
    return value


def _value(field: dataclasses.Field, value: Any, where: str) -> Any:
    """``value`` as ``field`` holds it (tuples for lists, floats for numbers), or a
    ScenarioError naming ``where`` when its type is wrong. Ranges are the class's."""
    default = field.default
    kind = number_kind(field)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ScenarioError(f"{where}: must be true or false, got {value!r}")
        return value
    if kind is not None:
        number, many = kind
        items = value if many else [value]
        if many and not isinstance(value, (list, tuple)):
            raise ScenarioError(f"{where}: must be a list of numbers, got {value!r}")
        for item in items:
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise ScenarioError(f"{where}: must be a number, got {item!r}")
            if number is int and not isinstance(item, int):
                raise ScenarioError(f"{where}: must be an integer, got {item!r}")
        converted = [number(item) for item in items]
        return tuple(converted) if many else converted[0]
    if isinstance(default, tuple):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ScenarioError(f"{where}: must be a list of strings, got {value!r}")
        return tuple(value)
    if not isinstance(value, str):
        raise ScenarioError(f"{where}: must be a string, got {value!r}")
    return value


def build(cls: type, values: dict[str, Any], where: str, sep: str = " ") -> Any:
    """``cls`` from a section's ``values``; errors name ``where + sep + key``."""
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ScenarioError(f"{where}: unknown keys {unknown} (known: {', '.join(names)})")
    clean = {k: _value(names[k], v, f"{where}{sep}{k}") for k, v in values.items()}
    try:
        return cls(**clean)
    except ConfigError as exc:
        name = getattr(exc, "setting", None)
        if name in clean:
            raise ScenarioError(f"{where}{sep}{name}: {exc.problem}") from None  # type: ignore[attr-defined]
        raise ScenarioError(f"{where}: {exc}") from None


def override(config: SimConfig, assignments: list[str]) -> SimConfig:
    """Apply ``section.key=value`` assignments (values parsed as TOML scalars/arrays)."""
    changes: dict[str, dict[str, Any]] = {}
    for item in assignments:
        path, sep, raw = item.partition("=")
        section, dot, key = path.strip().partition(".")
        if not sep or not dot or section not in SECTIONS:
            raise ScenarioError(
                f"--set {item!r}: expected SECTION.KEY=VALUE, SECTION one of {', '.join(SECTIONS)}"
            )
        changes.setdefault(section, {})[key.strip()] = toml_value(raw)
    for section, values in changes.items():
        current = getattr(config, section)
        merged = {f.name: _plain(getattr(current, f.name)) for f in dataclasses.fields(current)}
        merged.update(values)
        rebuilt = build(SECTIONS[section], merged, f"--set {section}", sep=".")
        config = config.replace(**{section: rebuilt})
    return config


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
