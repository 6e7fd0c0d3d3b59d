"""What every verb has in common: a misspelt flag answered within its verb, one
overwrite policy (``--force``), ``-o`` an output file, one spelling of a topology and
its flags, and ``--help`` grouped by what the user is doing."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from syncpace.cli.main import build_parser, main

DATA = Path(__file__).resolve().parents[1] / "data"
HEALTHY = DATA / "healthy"


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every verb's parser, ``fabric up`` and the like included, by its prog."""
    found: dict[str, argparse.ArgumentParser] = {}
    todo = [build_parser()]
    while todo:
        parser = todo.pop()
        found[parser.prog] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    return found


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["diagnose", str(HEALTHY), "--what-fi"],
            "syncpace diagnose: no such option --what-fi; did you mean --what-if?",
        ),
        (
            ["report", str(HEALTHY), "--outptu=r.html"],
            "syncpace report: no such option --outptu; did you mean --output?",
        ),
        (
            ["fabric", "up", "--hostz", "3"],
            "syncpace fabric up: no such option --hostz; did you mean --hosts?",
        ),
        (
            ["trace-info", str(HEALTHY), "--zzzzzz"],
            "syncpace trace-info: no such option --zzzzzz (see syncpace trace-info --help)",
        ),
    ],
)
def test_a_misspelt_flag_is_answered_within_its_verb(argv, line, capsys) -> None:
    assert main(argv) == 2
    assert _one_error_line(capsys) == line


def test_a_misspelt_verb_gets_a_suggestion(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["diagnos", str(HEALTHY)])
    assert exit_.value.code == 2
    assert "no such command 'diagnos'; did you mean diagnose?" in capsys.readouterr().err


def test_a_wrong_choice_of_another_argument_is_not_called_a_command(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["import", "kinet", "x", "--out", "y"])
    err = capsys.readouterr().err
    assert "format: invalid choice: 'kinet'; did you mean kineto?" in err
    assert "no such command" not in err


def test_every_verb_prints_its_help() -> None:
    """Help strings are argparse format strings: a literal % in one breaks its verb's help."""
    for prog, parser in _parsers().items():
        assert parser.format_help().startswith("usage: "), prog


# One overwrite policy --------------------------------------------------------------------
def _existing_trace(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(HEALTHY, out)
    return out


def _writers(tmp_path: Path) -> dict[str, tuple[list[str], Path]]:
    """Each verb that writes, with an output that already exists."""
    html, perfetto, plot = tmp_path / "r.html", tmp_path / "t.json", tmp_path / "s.html"
    for path in (html, perfetto, plot):
        path.write_text("earlier output")
    trace = _existing_trace(tmp_path)
    kineto = HEALTHY / "rank-00000.meta.json"  # refused before it is read
    return {
        "report": (["report", str(HEALTHY), "-o", str(html)], html),
        "export": (["export", "--perfetto", str(HEALTHY), "-o", str(perfetto)], perfetto),
        "merge": (
            ["merge", str(DATA / "straggler"), "--out", str(trace)],
            trace / "rank-00000.meta.json",
        ),
        "import": (
            ["import", "kineto", str(kineto), "--out", str(trace)],
            trace / "rank-00000.meta.json",
        ),
        "run": (["run", "--out", str(trace), "--", "true"], trace / "rank-00000.meta.json"),
        "simulate": (
            [
                "simulate",
                "--nodes",
                "2",
                "--gpus-per-node",
                "2",
                "--steps",
                "5",
                "--out",
                str(trace),
            ],
            trace / "rank-00000.meta.json",
        ),
        "simulate --plot": (
            ["simulate", "--nodes", "2,4", "--steps", "5", "--plot", str(plot)],
            plot,
        ),
        "demo": (["demo", "--out", str(tmp_path)], html),
    }


VERBS = ["report", "export", "merge", "import", "run", "simulate", "simulate --plot"]


@pytest.mark.parametrize("verb", [*VERBS, "demo"])
def test_every_verb_refuses_an_existing_output_without_force(verb, tmp_path, capsys) -> None:
    if verb == "demo":  # the demo's own directory, with an earlier report in it
        (tmp_path / "report.html").write_text("earlier output")
    argv, kept = _writers(tmp_path)[verb]
    before = kept.read_bytes()
    assert main(argv) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"syncpace {argv[0]}: error: ") and "add --force" in line, line
    assert kept.read_bytes() == before  # refused before anything was written


@pytest.mark.parametrize("verb", ["report", "export", "merge", "simulate"])
def test_force_replaces_the_output(verb, tmp_path, capsys) -> None:
    argv, kept = _writers(tmp_path)[verb]
    before = kept.read_bytes()
    assert main([*argv, "--force"]) == 0, capsys.readouterr().err
    assert kept.read_bytes() != before


def test_the_earlier_spelling_overwrite_still_works(tmp_path, capsys) -> None:
    argv, kept = _writers(tmp_path)["merge"]
    assert main([*argv, "--overwrite"]) == 0, capsys.readouterr().err
    assert "--overwrite" not in _help("syncpace merge")


def test_every_writing_verb_offers_force() -> None:
    for prog in ("report", "export", "merge", "import", "run", "simulate", "demo", "bench"):
        assert "--force" in _help(f"syncpace {prog}"), prog
    assert "--force" in _help("syncpace fabric run")


# -o, topology names, help groups ----------------------------------------------------------
def _help(prog: str) -> str:
    return _parsers()[prog].format_help()


def test_dash_o_is_an_output_file_in_every_verb() -> None:
    for prog, parser in _parsers().items():
        for action in parser._actions:
            if "-o" in action.option_strings:
                assert action.dest == "output", (prog, action.dest)


def test_the_reduction_of_bench_is_reduce_op(capsys) -> None:
    parser = _parsers()["syncpace bench"]
    assert parser.parse_args(["--reduce-op", "max"]).redop == "max"
    assert parser.parse_args(["--redop", "min"]).redop == "min"  # the earlier spelling
    assert "--redop" not in parser.format_help()


def test_one_spelling_of_topologies_and_their_flags(capsys) -> None:
    for prog, parser in _parsers().items():
        text = parser.format_help()
        assert not re.search(r"leafspine|fattree|--oversub\b", text), prog
    assert "leaf-spine" in _help("syncpace simulate") and "leaf-spine" in _help(
        "syncpace fabric up"
    )
    assert "--oversubscription" in _help("syncpace simulate")
    assert "--oversubscription" in _help("syncpace fabric up")
    argv = ["simulate", "--nodes", "2", "--steps", "5", "--json", "--topology", "leaf-spine"]
    assert main([*argv, "--oversubscription", "3"]) == 0
    topology = json.loads(capsys.readouterr().out)["config"]["topology"]
    assert (topology["kind"], topology["oversub"]) == ("leaf-spine", 3.0)
    assert main([*argv[:-1], "leafspine", "--oversub", "2"]) == 0  # the earlier spellings
    topology = json.loads(capsys.readouterr().out)["config"]["topology"]
    assert (topology["kind"], topology["oversub"]) == ("leaf-spine", 2.0)


def _settings_classes() -> set[str]:
    import syncpace.analysis.thresholds as thresholds
    import syncpace.bench.config as bench
    import syncpace.capture.config as capture
    import syncpace.control.config as control
    import syncpace.demo.pipeline as demo
    import syncpace.diagnose.settings as diagnose
    import syncpace.importers.config as importers
    import syncpace.monitor.config as monitor
    import syncpace.sim.settings as sim
    import syncpace.validate.settings as validate

    modules = (
        thresholds,
        bench,
        capture,
        control,
        demo,
        diagnose,
        importers,
        monitor,
        sim,
        validate,
    )
    return {
        name
        for module in modules
        for name, obj in vars(module).items()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj)
    }


def test_help_groups_say_what_the_user_is_doing() -> None:
    classes = _settings_classes()
    assert {"Thresholds", "DiagnoseSettings", "TraceConfig"} <= classes
    for prog, parser in _parsers().items():
        for group in parser._action_groups:
            words = set(re.findall(r"\w+", group.title or ""))
            assert not words & classes, (prog, group.title)
