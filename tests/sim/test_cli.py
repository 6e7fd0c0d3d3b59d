"""``syncpace simulate``: single runs, studies, scenario files and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncpace.cli.main import main
from syncpace.sim import scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["simulate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_single_run_writes_a_trace(tmp_path: Path, capsys) -> None:
    code, out, _ = run(
        capsys,
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
        "--steps",
        "20",
        "--out",
        str(tmp_path / "t"),
        "--json",
    )
    assert code == 0
    payload = json.loads(out)
    assert payload["summary"]["world_size"] == 8
    assert (tmp_path / "t" / "rank-00007.meta.json").exists()


def test_study_json_has_both_arms(capsys) -> None:
    code, out, _ = run(
        capsys,
        "--nodes",
        "2,4",
        "--topology",
        "leafspine",
        "--oversub",
        "3",
        "--steps",
        "30",
        "--strategy",
        "early",
        "--json",
    )
    assert code == 0
    rows = json.loads(out)["rows"]
    assert [(r["nodes"], r["pacing"]) for r in rows] == [
        (2, False),
        (4, False),
        (2, True),
        (4, True),
    ]
    assert rows[0]["speedup"] == 1.0 and rows[0]["efficiency"] == 1.0
    keys = {"throughput", "cv", "p99_ms", "pacing_gain", "ab_state", "pacing_on", "run_ahead_ms"}
    assert all(keys <= set(r) for r in rows)
    assert [r["pacing_on"] for r in rows] == ["off", "off", "device", "device"]
    # the paced arm runs the live pacer: its A/B guard is still probing after 30 steps
    assert [r["ab_state"] for r in rows] == [None, None, "probing", "probing"]


def test_study_table_and_plot(tmp_path: Path, capsys) -> None:
    pytest.importorskip("plotly")
    plot = tmp_path / "study.html"
    code, out, _ = run(capsys, "--nodes", "1,2", "--steps", "20", "--plot", str(plot))
    assert code == 0 and "scaling study" in out
    assert plot.stat().st_size > 100_000  # plotly.js inlined: works offline


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--topology", "torus"], "--topology: must be one of switch, leaf-spine, fat-tree"),
        (["--nodes", "4,x"], "--nodes expects integers"),
        (["--strategy", "sometimes"], "--strategy: must be one of off, early, target"),
        (["--oversub", "nan"], "--oversubscription: must be a finite number in [1, 1000], got nan"),
        (["--set", "run.seed=-1"], "--set run.seed: must be in [0, 1e18], got -1"),
        (["--set", "noise.jitterr=0.1"], "unknown keys ['jitterr']"),
        (["--set", "nosuch.key=1"], "expected SECTION.KEY=VALUE"),
        (["--scenario", "/nonexistent.toml"], "/nonexistent.toml: cannot read"),
        (["--pacing-on", "gpu"], "--pacing-on expects device or host or a comma list"),
        (["--pacing-on", "device,host"], "compares paced arms: give a pacing strategy"),
        (["--set", "workload.pacing_on=gpu"], "--set workload.pacing_on: must be one of"),
        (["--set", "workload.host_ms=-1"], "--set workload.host_ms: must be in [0, 1e7]"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv: list[str], message: str) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[topology]\nkind = 'ring'\n", "bad.toml [topology] kind: must be one of"),
        ("[topologyy]\nnodes = 2\n", "unknown section [topologyy]"),
        ("[noise]\njitter = 'big'\n", "bad.toml [noise] jitter: must be a number, got 'big'"),
        ("[topology\n", "not valid TOML"),
        ("[study]\nnodes = [4, -1]\n", "bad.toml [study] nodes: must be a list of integers"),
        ("[study]\npace = true\n", "[study]: 'pace' is gone"),
        ("[study]\npacing_on = ['cpu']\n", "bad.toml [study] pacing_on: must be a list of"),
        ("[workload]\nrun_ahead_steps = 1.5\n", "[workload] run_ahead_steps: must be an integer"),
    ],
)
def test_bad_scenario_file(tmp_path: Path, capsys, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    code, _, err = run(capsys, "--scenario", str(path))
    assert code == 2 and message in err


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.stem)
def test_example_scenarios_load(path: Path) -> None:
    scen = scenario.load(path)
    assert scen.config.name and scen.description


def test_reference_study_scenario_is_the_reference_setting() -> None:
    scen = scenario.load(EXAMPLES / "reference_study.toml")
    assert scen.study_nodes == (4, 8, 16, 32, 64) and scen.config.pacing.strategy == "early"
    assert scen.config.topology.kind == "leaf-spine" and scen.config.topology.oversub == 3


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.stem)
def test_example_scenarios_run(path: Path) -> None:
    from syncpace.sim.engine import simulate

    cfg = scenario.load(path).config
    cfg = cfg.replace(run=type(cfg.run)(steps=6, warmup=1, seed=0, record_events=False))
    assert simulate(cfg).summary()["iteration_ms"] > 0


def test_study_writes_one_trace_per_run(tmp_path: Path, capsys) -> None:
    code, _, _ = run(
        capsys,
        "--nodes",
        "1,2",
        "--gpus-per-node",
        "2",
        "--steps",
        "12",
        "--strategy",
        "early",
        "--out",
        str(tmp_path),
        "--json",
    )
    assert code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "nodes-1",
        "nodes-1-paced",
        "nodes-2",
        "nodes-2-paced",
    ]


def test_a_study_of_the_delay_on_the_device_and_on_the_host(tmp_path: Path, capsys) -> None:
    code, out, _ = run(
        capsys,
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--steps",
        "12",
        "--strategy",
        "early",
        "--pacing-on",
        "device,host",
        "--set",
        "workload.host_ms=5",
        "--out",
        str(tmp_path),
        "--json",
    )
    assert code == 0  # one scale, two places of the delay: a study
    rows = json.loads(out)["rows"]
    assert [(r["nodes"], r["pacing"], r["pacing_on"]) for r in rows] == [
        (1, False, "off"),
        (1, True, "device"),
        (1, True, "host"),
    ]
    assert all(r["run_ahead_ms"] > 0 for r in rows)  # the host ran ahead of its device
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "nodes-1",
        "nodes-1-paced",
        "nodes-1-paced-host",
    ]


def test_one_place_of_the_delay_lands_in_the_workload(tmp_path: Path, capsys) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[study]\nnodes = [1, 2]\npacing_on = ["host", "device"]\n')
    assert scenario.load(path).study_pacing_on == ("host", "device")
    argv = ("--scenario", str(path), "--gpus-per-node", "2", "--steps", "8", "--json")
    code, out, _ = run(capsys, *argv, "--strategy", "early")
    rows = json.loads(out)["rows"]
    assert (
        code == 0 and [r["pacing_on"] for r in rows] == ["off"] * 2 + ["host"] * 2 + ["device"] * 2
    )
    code, out, _ = run(capsys, "--nodes", "1", "--steps", "8", "--pacing-on", "host", "--json")
    assert code == 0 and json.loads(out)["config"]["workload"]["pacing_on"] == "host"
