"""The fuzzer, bounded for CI: damaged real traces, scenario files and command lines.

Each case must end clean: a one-line refusal naming the file, or accepted with the
damage reported by every verb, or no change at all; never a traceback, a hang or a
silent wrong answer (see harness.py). ``benchmarks/fuzz.py`` runs thousands.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from fuzz import harness as h
from syncpace.cli.main import main
from syncpace.trace.schema import EVENTS

CI = settings(
    max_examples=int(os.environ.get("SYNCPACE_FUZZ_EXAMPLES", "35")),
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return h.base_traces(tmp_path_factory.mktemp("bases"))


@pytest.fixture(scope="module")
def snapshots(bases):
    return {name: h._snapshot(root) for name, root in bases.items()}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("work")


def _assert_clean(outcome: h.Outcome, case: object) -> None:
    assert outcome.kind == "clean", f"{case}: {outcome.kind}: {outcome.detail}"


#: The damage the fuzzing pass found silent or fatal, always run.
KNOWN = [
    h.Damage("writer", "fs", "rank-00001.meta.json", ("fifo",)),
    h.Damage("writer", "fs", "rank-00001.meta.json", ("dev_zero",)),
    h.Damage("writer", "fs", "rank-00002.events.arrow", ("fifo",)),
    h.Damage("writer", "fs", "rank-00002.steps.arrow", ("dev_zero",)),
    h.Damage("writer", "fs", "rank-00000.events.arrow", ("directory",)),
    h.Damage("writer", "batch_cut", "rank-00001.events.arrow", (3, False)),
    h.Damage("writer", "batch_cut", "rank-00001.steps.arrow", (2, True)),
    h.Damage("writer", "meta_value", "rank-00000.meta.json", (("finished", "false"),)),
    h.Damage("writer", "meta_value", "rank-00002.meta.json", (("clock", {"offset_ns": "12ms"}),)),
    h.Damage("writer", "meta_value", "rank-00001.meta.json", (("host", {"name": "x"}),)),
    h.Damage("writer", "meta_text", "rank-00001.meta.json", (h.BAD_META_TEXT[0],)),
    h.Damage("writer", "meta_text", "rank-00001.meta.json", (h.BAD_META_TEXT[2],)),
    h.Damage("writer", "meta_text", "rank-00001.meta.json", (h.BAD_META_TEXT[3],)),
    h.Damage("writer", "meta_text", "rank-00001.meta.json", (h.BAD_META_TEXT[4],)),
    h.Damage("writer", "duplicate_rank_file", "rank-00001.meta.json"),
    h.Damage("writer", "bad_value", "rank-00001.events.arrow", (("enter_ns", h.INT64_MAX), 5)),
    h.Damage("writer", "bad_value", "rank-00001.events.arrow", (("exit_ns", 3), 0)),
    h.Damage("writer", "bad_value", "rank-00002.events.arrow", (("rank", 0), 4)),
    h.Damage("writer", "bad_value", "rank-00000.events.arrow", (("op", "all_reduse"), 1)),
    h.Damage("writer", "bad_value", "rank-00000.events.arrow", (("timing", "sundial"), 1)),
    h.Damage("writer", "bad_value", "rank-00000.steps.arrow", (("start_ns", -1), 1)),
    h.Damage("writer", "duplicate_rows", "rank-00000.steps.arrow", (2, 1)),
    h.Damage("writer", "retype", "rank-00000.events.arrow", (3, "dup")),
    h.Damage("writer", "null", "rank-00000.events.arrow", (9, 2)),
    h.Damage("writer", "hostile", "rank-00001.meta.json", ("host", "[/]"), True),
    h.Damage("writer", "hostile", "rank-00001.meta.json", ("host", "\x1b[31mred"), True),
    h.Damage("writer", "hostile", "rank-00001.meta.json", ("group", "[link=x]y[/link]"), True),
    h.Damage("writer", "empty_trace", "", ("both",)),
    h.Damage("writer", "empty_trace", "", ("no_steps",)),
    # steps but not one collective: the fabric's judgement of no transfers
    h.Damage("writer", "empty_trace", "", ("no_events",)),
    h.Damage("run", "empty_trace", "", ("one_step",)),
    h.Damage("v1", "batch_cut", "rank-00003.events.arrow", (0, False)),
    h.Damage("run", "flip", "rank-00001.events.arrow", (1500, 4)),
    h.Damage("writer", "flip", "rank-00001.meta.json", (92, 68)),
    h.Damage("v1", "null", "rank-00000.events.arrow", (1, 0)),  # a null step, streamed
    # a device clock claimed by the metadata of a trace written without one
    h.Damage("v1", "meta_value", "rank-00000.meta.json", (("device_clock", "cuda"),)),
    h.Damage("writer", "null", "rank-00000.events.arrow", (1, 0)),
    # a byte of a steps file's schema metadata: not UTF-8 (polars panicked on it)
    h.Damage("writer", "flip", "rank-00001.steps.arrow", (177, 0x80)),
    # a valid value (no error) in a rewritten file: only the missing checksums tell
    h.Damage("writer", "null", "rank-00001.events.arrow", (EVENTS.names.index("error"), 5)),
    # always-on files: a digit of a detection, a cut detections file, a finished rank's
    # summaries gone, a segment's bad row, a kept segment gone
    h.Damage("always_on", "flip", "rank-00000.monitor.jsonl", (12, 12)),
    h.Damage("always_on", "truncate", "rank-00000.monitor.jsonl", (0.9160801176044375,)),
    h.Damage("always_on", "remove", "rank-00000.summary.arrow"),
    h.Damage("always_on", "remove", "rank-00000.monitor.jsonl"),
    h.Damage("always_on", "bad_value", "rank-00001.events.000017.arrow", (("exit_ns", -7), 796)),
    h.Damage("always_on", "remove", "rank-00001.events.000029.arrow"),
    h.Damage("always_on", "monitor_line", "rank-00001.monitor.jsonl", (h.BAD_DETECTIONS[1], 1)),
]


@pytest.mark.parametrize("damage", KNOWN, ids=str)
def test_known_damage(damage, bases, snapshots, work):
    outcome = h.run_trace_case(damage, bases, work, snapshots)
    assert not outcome.detail.startswith("damage not applicable"), outcome.detail
    _assert_clean(outcome, damage)


@pytest.mark.slow
def test_damaged_traces(bases, snapshots, work):
    @CI
    @given(h.damages(bases))
    def case(damage):
        _assert_clean(h.run_trace_case(damage, bases, work, snapshots), damage)

    case()


def test_damaged_scenario_files(work):
    @settings(CI)
    @given(h.scenario_damages())
    def case(damage):
        _assert_clean(h.run_scenario_case(damage, work), damage)

    case()


def test_bad_command_lines(bases, work):
    # NaN and inf as settings are the settings' own finite check (tests of config);
    # benchmarks/fuzz.py runs them here too.
    values = [v for v in h.CLI_VALUES if v not in h.NON_FINITE]

    @CI
    @given(h.command_lines(bases["writer"], values))
    def case(line):
        _assert_clean(h.run_command_line(line, work), line)

    case()


def test_a_read_only_or_missing_place_for_outputs_is_one_line(bases, tmp_path, capsys):
    target = str(tmp_path / "missing" / "deeper" / "out.html")
    assert main(["report", str(bases["writer"]), "-o", target]) == 2
    assert main(["export", "--perfetto", str(bases["writer"]), "-o", target]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(target in line for line in err), err
    assert all("No such file or directory" in line for line in err)


def test_an_empty_trace_is_never_healthy(bases, snapshots, tmp_path, capsys):
    damage = h.Damage("writer", "empty_trace", "", ("both",))
    outcome = h.run_trace_case(damage, bases, tmp_path, snapshots)
    assert outcome.kind == "clean" and outcome.detail == "insufficient data reported"
    capsys.readouterr()


def test_loss_reaches_every_verb(bases, tmp_path, capsys):
    root = tmp_path / "t"
    shutil.copytree(bases["writer"], root)
    h.apply(h.Damage("writer", "batch_cut", "rank-00002.events.arrow", (2, False)), root)
    assert main(["diagnose", str(root)]) == 0
    terminal = capsys.readouterr().out
    assert "rank 2: events 4 found of 24 declared" in terminal
    assert "rank-00002.events.arrow: ends without its end-of-stream marker" in terminal
    assert main(["diagnose", str(root), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["metrics"]["runs"][0]
    assert run["quality"]["completeness"]["2"]["events_missing"] == 20
    modes = {f["mode"] for f in json.loads(_json(["diagnose", str(root), "--json"]))["findings"]}
    assert "incomplete_trace" in modes and "healthy" not in modes
    assert main(["report", str(root), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "<div class='completeness lossy' data-lossy='1'>" in page
    assert "<li>rank 2: events 4 found of 24 declared; cut: events</li>" in page
    assert "rank-00002.events.arrow: ends without its end-of-stream marker" in page
    capsys.readouterr()


def _json(argv: list[str]) -> str:
    code, out, _ = h._run_cli(argv, 30)
    assert code == 0
    return out
