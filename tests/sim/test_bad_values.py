"""Scenario files with bad or extreme values: one line naming the file and key, or a
finite result; never a traceback, a NaN in the output, invalid JSON or a hang."""

from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from syncpace.cli.main import main
from syncpace.config import declared_intervals, number_kind
from syncpace.sim.scenario import SECTIONS

#: Sizes that set the simulation's cost are held small; every other number is drawn
#: from its declared interval's edges (and the default between them).
SMALL = {
    "topology": {"nodes": 2, "gpus_per_node": 2, "nics_per_node": 2, "cluster_nodes": 0},
    "run": {"steps": 12, "warmup": 2},
    "workload": {"model_mb": 4.0, "bucket_mb": 1.0},
}


def simulate(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["simulate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[topology]\nnodes = 1.5\n", "bad.toml [topology] nodes: must be an integer, got 1.5"),
        ("[run]\nseed = -1\n", "bad.toml [run] seed: must be in [0, 1e18], got -1"),
        ("[run]\nsteps = nan\n", "bad.toml [run] steps: must be an integer, got nan"),
        ("[noise]\njitter = inf\n", "bad.toml [noise] jitter: must be a finite number"),
        ("[noise]\nslow_factors = [nan]\n", "bad.toml [noise] slow_factors: must be a finite"),
        ("[topology]\nnodes = true\n", "bad.toml [topology] nodes: must be a number, got True"),
        ("[topology]\nfar_gpus = 3\n", "bad.toml [topology] far_gpus: must be a list of numbers"),
        ("[network]\ntier = 3\n", "bad.toml [network] tier: must be a string, got 3"),
        ("name = 3\n", "bad.toml: name must be a string, got 3"),
        ("[pacing]\nstrategy = 'fast'\n", "bad.toml [pacing] strategy: must be one of off, early"),
        ("run = 3\n", "bad.toml [run]: must be a table, got 3"),
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", "bad.toml: not valid TOML"),
        (
            "[topology]\nnodes = 100000\ngpus_per_node = 1024\n[run]\nsteps = 10000000\n",
            "need about",
        ),
    ],
)
def test_a_bad_scenario_is_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    code, out, err = simulate(capsys, "--scenario", str(path))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and message in err, err


def test_a_scenario_that_is_not_utf8_is_one_line(tmp_path, capsys):
    path = tmp_path / "latin1.toml"
    path.write_bytes("name = 'caf\xe9'\n".encode("latin-1"))
    code, _, err = simulate(capsys, "--scenario", str(path))
    assert code == 2
    assert err == f"syncpace simulate: error: {path}: not UTF-8 text (byte 11 is 0xe9)\n"


def test_a_fifo_is_refused_without_opening_it(tmp_path, capsys):
    fifo = tmp_path / "scenario.toml"
    os.mkfifo(fifo)  # opening it would wait for a writer forever
    code, _, err = simulate(capsys, "--scenario", str(fifo))
    assert code == 2 and err == f"syncpace simulate: error: {fifo}: not a regular file\n"


def test_an_oversized_file_is_refused(tmp_path, capsys):
    path = tmp_path / "big.toml"
    path.write_text("# padding\n" * 500_000)
    code, _, err = simulate(capsys, "--scenario", str(path))
    assert code == 2 and "a settings file is at most" in err


def _edges(cls: type, field) -> list:
    interval = declared_intervals(cls)[field.name]
    kind, _ = number_kind(field)
    lo = interval.lo if not interval.lo_open else interval.lo + max(abs(interval.lo), 1) * 1e-9
    hi = interval.hi if not interval.hi_open else interval.hi * (1 - 1e-9)
    if kind is int:
        lo, hi = math.ceil(lo), math.floor(hi)
    return [lo, hi, field.default]


def _section(name: str) -> st.SearchStrategy[dict]:
    cls = SECTIONS[name]
    values = {}
    for field in cls.__dataclass_fields__.values():
        kind = number_kind(field)
        if kind is None or kind[1] or field.name in SMALL.get(name, {}):
            continue
        values[field.name] = st.sampled_from(_edges(cls, field))
    return st.fixed_dictionaries({}, optional=values).map(
        lambda drawn: {**drawn, **SMALL.get(name, {})}
    )


def _toml(value: float | int) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(
    sections=st.fixed_dictionaries({name: _section(name) for name in SECTIONS if name != "pacing"}),
    strategy=st.sampled_from(["off", "early", "target"]),
)
def test_extreme_values_give_a_finite_result_or_one_line(tmp_path, capsys, sections, strategy):
    lines = [f"[pacing]\nstrategy = '{strategy}'"]
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {_toml(value)}" for key, value in values.items()]
    path = tmp_path / "edge.toml"
    path.write_text("\n".join(lines) + "\n")
    code, out, err = simulate(capsys, "--scenario", str(path), "--json")
    if code == 2:  # refused: one line naming the scenario
        assert out == "" and err.count("\n") == 1 and str(path) in err, err
        return
    assert code == 0, err

    def no_constant(name: str) -> None:
        raise AssertionError(f"{name} in the JSON output")

    summary = json.loads(out, parse_constant=no_constant)["summary"]
    assert all(math.isfinite(v) for v in summary.values()), summary
