"""Every numeric setting flag of every verb, found by walking the parser: NaN, ±inf and
huge values end in one line naming the flag, exit 2, before any work starts.

What would start work (a job, a fabric, a simulation, the grid) is replaced by a
function that fails the test, so a value that slipped through validation shows here
as a failure instead of running.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from syncpace.cli.main import build_parser, main
from syncpace.config import number_kind
from test_settings import CLASSES

DATA = Path(__file__).resolve().parents[1] / "data" / "healthy"
NUMERIC = {
    f.name
    for cls in CLASSES
    for f in dataclasses.fields(cls)
    if (kind := number_kind(f)) is not None and not kind[1]
}
#: What a verb needs besides its options to get as far as reading them.
POSITIONAL = {
    "command": ["--", "true"],
    "dir": [str(DATA)],
    "dirs": [str(DATA)],
    "format": ["kineto"],
    "sources": [str(DATA), "--out", "out"],  # import: its required --out with its sources
}
WORK = [
    "syncpace.cli.run.run_command",
    "syncpace.cli.run.prepare_run_dir",
    "syncpace.cli.fabric.require_root",
    "syncpace.cli.demo.run_demo",
    "syncpace.cli.validate.run_grid",
    "syncpace.cli.validate.run_reference",
    "syncpace.cli.bench.launch_local",
    "syncpace.cli.bench.run_rank",
    "syncpace.cli.simulate.simulate",
    "syncpace.cli.simulate.run_study",
    "syncpace.cli.import_traces.convert",
]


def _cases() -> list[tuple[tuple[str, ...], str]]:
    cases = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        positional: list[str] = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
            elif not action.option_strings:
                positional += POSITIONAL.get(action.dest, [])
        for action in parser._actions:
            takes_value = action.nargs is None and not isinstance(
                action, (argparse.BooleanOptionalAction, argparse._StoreConstAction)
            )
            dest = action.dest.removeprefix("spec_")  # fabric's topology flags
            if action.option_strings and takes_value and dest in NUMERIC:
                cases.append(((*path, action.option_strings[-1]), " ".join(positional)))

    walk(build_parser(), ())
    return cases


CASES = _cases()
BAD = ("nan", "inf", "-inf", "1e300", "1" + "0" * 30)


def test_the_walk_finds_the_numeric_flags_of_every_verb():
    verbs = {path[0] for path, _ in CASES}
    assert {"run", "diagnose", "bench", "simulate", "validate", "demo", "fabric"} <= verbs
    assert len(CASES) > 60


@pytest.mark.parametrize(("path", "rest"), CASES, ids=[" ".join(p) for p, _ in CASES])
def test_a_bad_number_is_one_line_naming_the_flag(path, rest, monkeypatch, tmp_path, capsys):
    for target in WORK:

        def reached(*_args, _target=target, **_kwargs):
            raise AssertionError(f"{_target} ran with a bad value")

        monkeypatch.setattr(target, reached)
    monkeypatch.chdir(tmp_path)
    *verb, flag = path
    for bad in BAD:
        argv = [*verb, f"{flag}={bad}", *rest.split()]
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        assert err.count("\n") == 1, err
        assert err.startswith(f"syncpace {verb[0]}: error: {flag}"), err
