"""Every setting of every configuration class of the package, generated, not listed.

The classes are found by importing every module and keeping the dataclasses whose
fields are all declared with ``setting()``. For them:

* no environment variable names two settings, and only the settings of what runs in
  the job's ranks read the environment at all: a variable meant for one command is
  never read by another;
* every number is checked: NaN, ±inf and huge values are refused with one line that
  names the field, the flag, the variable or the scenario key it came from.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import pkgutil
import re
from pathlib import Path

import pytest

import syncpace
from syncpace.config import (
    add_flags,
    declared_intervals,
    env_name,
    env_prefix,
    flag_name,
    from_env,
    from_flags,
    number_kind,
)
from syncpace.errors import SyncpaceError

SRC = Path(syncpace.__file__).resolve().parent


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages([str(SRC)], prefix="syncpace."):
        if not info.name.endswith("__main__"):  # runs the command line when imported
            names.append(info.name)
    return sorted(names)


def _config_classes() -> list[type]:
    found: dict[str, type] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
                continue
            if obj.__module__ != name:
                continue
            fields = dataclasses.fields(obj)
            if fields and all("help" in f.metadata for f in fields):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


CLASSES = _config_classes()
ENV_CLASSES = [c for c in CLASSES if env_prefix(c)]
FLAG_CLASSES = [c for c in CLASSES if not env_prefix(c)]


def _numeric(cls: type) -> list[tuple[dataclasses.Field, type, bool]]:
    out = []
    for field in dataclasses.fields(cls):
        kind = number_kind(field)
        if kind is not None:
            out.append((field, *kind))
    return out


NUMERIC = [(cls, f, kind, many) for cls in CLASSES for f, kind, many in _numeric(cls)]
BAD_FLOATS = (math.nan, math.inf, -math.inf, 1e300, -1e300)
BAD_INTS = (10**30, -(10**30))


def _bad_values(kind: type) -> tuple:
    return BAD_FLOATS + BAD_INTS if kind is int else BAD_FLOATS


def _id(cls: type, field: dataclasses.Field) -> str:
    return f"{cls.__name__}.{field.name}"


#: The settings of what runs inside the job's ranks: the only ones read from variables.
IN_JOB = {
    "TraceConfig",
    "PacingConfig",
    "ControllerConfig",
    "BenchConfig",
    "MonitorConfig",
    "TelemetryConfig",
}


def test_discovery_finds_the_configuration_of_every_layer():
    names = {c.__name__ for c in CLASSES}
    commands = {
        "Thresholds",
        "FabricSpec",
        "TopologySpec",
        "WorkloadSpec",
        "NoiseSpec",
        "NetworkSpec",
        "InterferenceSpec",
        "RunSpec",
        "SimulateSettings",
        "GridSettings",
        "ReferenceSettings",
        "DemoConfig",
        "ImportConfig",
    }
    assert IN_JOB | commands <= names
    assert len(NUMERIC) > 100


def test_only_what_runs_in_the_job_reads_the_environment():
    """The rule of config.py: a command's own settings come from its flags only."""
    assert {c.__name__ for c in ENV_CLASSES} == IN_JOB


def test_no_variable_names_two_settings():
    owners: dict[str, list[str]] = {}
    for cls in ENV_CLASSES:
        for field in dataclasses.fields(cls):
            owners.setdefault(env_name(cls, field.name), []).append(_id(cls, field))
    shared = {name: who for name, who in owners.items() if len(who) > 1}
    assert not shared
    # the variables the code reads by hand (test hooks, the fabric's own) are no setting's,
    # except the run directory, which the bootstrap reads before syncpace is imported
    literals = set()
    for path in SRC.rglob("*.py"):
        literals |= set(re.findall(r"\"(SYNCPACE_[A-Z0-9_]+)\"", path.read_text()))
    assert {"SYNCPACE_PACE_BREAK", "SYNCPACE_BENCH_CORRUPT"} <= literals
    assert literals & set(owners) == {"SYNCPACE_DIR"}


@pytest.mark.parametrize("cls", FLAG_CLASSES, ids=lambda c: c.__name__)
def test_a_command_ignores_variables_named_after_its_settings(cls, monkeypatch):
    """``SYNCPACE_PACE=early syncpace demo`` once failed: the demo read a variable meant
    for ``syncpace run``. No command's settings read any variable now."""
    for field in dataclasses.fields(cls):
        monkeypatch.setenv("SYNCPACE_" + field.name.upper(), "not-a-value")
    assert from_flags(cls, argparse.Namespace()) == cls()


def test_the_demo_no_longer_reads_syncpace_run_variables(monkeypatch, capsys):
    from syncpace.cli.main import main

    monkeypatch.setenv("SYNCPACE_PACE", "early")
    monkeypatch.setenv("SYNCPACE_STRATEGY", "early")
    monkeypatch.setenv("SYNCPACE_PACED_RUN", "early")
    code = main(["demo", "--max-steps", "5"])  # refused before anything runs
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        "syncpace demo: error: max_steps must be 0 or >= 12, got 5",
    ]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_number_has_a_declared_interval(cls):
    numeric = {f.name for f, _, _ in _numeric(cls)}
    assert set(declared_intervals(cls)) == numeric


@pytest.mark.parametrize(
    ("cls", "field", "kind", "many"),
    NUMERIC,
    ids=[_id(c, f) for c, f, _, _ in NUMERIC],
)
def test_non_finite_and_huge_numbers_are_refused_by_name(cls, field, kind, many):
    for bad in _bad_values(kind):
        value = (bad,) if many else bad
        with pytest.raises(SyncpaceError) as info:
            cls(**{field.name: value})
        message = str(info.value)
        assert message.startswith(f"{field.name}: must be"), message
        assert "\n" not in message


FLAGGED = [(c, f, k) for c, f, k, many in NUMERIC if not many]


@pytest.mark.parametrize(("cls", "field", "kind"), FLAGGED, ids=[_id(c, f) for c, f, _ in FLAGGED])
def test_a_bad_flag_is_named_as_the_flag(cls, field, kind):
    parser = argparse.ArgumentParser()
    add_flags(parser, cls)
    flag = flag_name(field.name)  # a renamed field's error names its current flag
    for bad in _bad_values(kind):
        text = repr(bad) if isinstance(bad, float) else str(bad)
        args = parser.parse_args([f"{flag}={text}"])
        with pytest.raises(SyncpaceError) as info:
            from_flags(cls, args)
        assert str(info.value).startswith(f"{flag}: "), str(info.value)


ENV_NUMERIC = [(c, f, k) for c, f, k, many in NUMERIC if env_prefix(c) and not many]


@pytest.mark.parametrize(
    ("cls", "field", "kind"), ENV_NUMERIC, ids=[_id(c, f) for c, f, _ in ENV_NUMERIC]
)
def test_a_bad_variable_is_named_as_the_variable(cls, field, kind):
    name = env_name(cls, field.name)
    for bad in _bad_values(kind):
        with pytest.raises(SyncpaceError) as info:
            from_env(cls, {name: repr(bad) if isinstance(bad, float) else str(bad)})
        assert str(info.value).startswith(f"{name}: "), str(info.value)


def _scenario_sections() -> dict[str, type]:
    from syncpace.sim.scenario import SECTIONS

    return SECTIONS


SCENARIO_NUMERIC = [
    (section, f, kind, many)
    for section, cls in _scenario_sections().items()
    for f, kind, many in _numeric(cls)
]


def _toml(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


@pytest.mark.parametrize(
    ("section", "field", "kind", "many"),
    SCENARIO_NUMERIC,
    ids=[f"{s}.{f.name}" for s, f, _, _ in SCENARIO_NUMERIC],
)
def test_a_bad_scenario_value_is_named_by_file_section_and_key(
    tmp_path, section, field, kind, many
):
    from syncpace.sim import scenario

    path = tmp_path / "s.toml"
    for bad in _bad_values(kind):
        text = _toml(bad)
        path.write_text(f"[{section}]\n{field.name} = {f'[{text}]' if many else text}\n")
        with pytest.raises(SyncpaceError) as info:
            scenario.load(path)
        assert str(info.value).startswith(f"{path} [{section}] {field.name}: "), str(info.value)
