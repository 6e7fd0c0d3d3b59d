"""The replay check: a model calibrated from a trace replays it first, and its
predictions are withheld, with the reason, when it does not.

The trace is a simulated demo-like job (4 nodes of 1 GPU, a straggler 80 ms late every
step, jittered compute): its truth is the configuration that made it. Calibrated from
it, the model must give it back within the limits; the same model deliberately
miscalibrated (compute 1.5x, or communication far more variable than measured) must
be withheld, in the library, on the command line and on the scaling page.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from syncpace.cli.main import main
from syncpace.sim.calibrate import Calibration, calibrate
from syncpace.sim.check import CV_TOLERANCE, MEAN_TOLERANCE, ReplayCheck, replay_check
from syncpace.sim.engine import simulate
from syncpace.sim.tracewrite import write_trace

from .conftest import config

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "demo_scaling.toml"


def _truth():
    return config(
        topology={"nodes": 4, "gpus_per_node": 1, "nics_per_node": 1, "nic_gbps": 1.0},
        workload={"fwd_ms": 2.0, "bwd_ms": 4.0, "opt_ms": 1.0, "model_mb": 1.14},
        noise={"jitter": 0.1, "os_burst_prob": 0.05, "os_burst_ms": 8.0},
        network={"algorithm": "ring", "alpha_us": 150.0},
        run={"steps": 60, "warmup": 1},
    )


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> tuple[Path, Calibration]:
    truth = _truth()
    noise = dataclasses.replace(truth.noise, extra_ranks=(2,), extra_ms=(78.0, 80.0, 86.0))
    run = simulate(truth.replace(noise=noise))
    path = write_trace(run, tmp_path_factory.mktemp("check") / "trace")
    return path, calibrate(path)


def test_the_calibrated_model_replays_its_trace(traced) -> None:
    _, cal = traced
    check = replay_check(cal.apply(_truth()), cal)
    assert check.passed, check.line()
    assert check.nodes == 4 and check.withheld() is None
    assert abs(check.mean_error) <= MEAN_TOLERANCE and abs(check.cv_error) <= CV_TOLERANCE
    assert check.line().startswith("simulator check at 4 nodes: ")


def test_a_miscalibrated_model_is_withheld(traced) -> None:
    _, cal = traced
    cfg = cal.apply(_truth())
    wl = dataclasses.replace(cfg.workload, fwd_ms=cfg.workload.fwd_ms + 40)
    slower = cfg.replace(workload=wl)
    check = replay_check(slower, cal)
    assert not check.passed and check.mean_error > MEAN_TOLERANCE
    assert check.withheld() == f"predictions withheld: {check.reason}"
    assert "does not replay it at 4 nodes: mean +" in str(check.reason)
    # the spread alone: the communication 5x as variable as measured
    wide = dataclasses.replace(cfg.network, service_quantiles=(0.2, 1.0, 1.0, 6.0))
    check = replay_check(cfg.replace(network=wide), cal)
    assert not check.passed and "CV +" in str(check.reason), check.line()


def test_a_trace_that_does_not_fill_nodes_cannot_be_replayed(traced) -> None:
    _, cal = traced
    cfg = cal.apply(_truth())
    three = cfg.replace(topology=dataclasses.replace(cfg.topology, gpus_per_node=3))
    check = replay_check(three, cal)
    assert check.nodes == 0 and not check.passed
    assert check.line() == (
        "simulator check: not run (the trace's 4 ranks do not fill nodes of 3 GPUs)"
    )


def test_the_check_reads_back_from_json(traced) -> None:
    _, cal = traced
    check = replay_check(cal.apply(_truth()), cal)
    assert ReplayCheck.from_json(json.loads(json.dumps(check.to_json()))) == check


def _simulate(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["simulate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_simulate_prints_the_check_before_its_study(traced, tmp_path, capsys) -> None:
    path, _ = traced
    page = tmp_path / "scaling.html"
    args = ["--scenario", str(SCENARIO), "--calibrate", str(path), "--nodes", "4,8"]
    code, out, _ = _simulate(capsys, *args, "--steps", "60", "--plot", str(page))
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("simulator check at 4 nodes: ")
    assert "scaling study" in out and "predictions withheld" not in out
    if page.exists():  # plotly installed: the page carries the check under its title
        assert "simulator check at 4 nodes: " in page.read_text(encoding="utf-8")


def test_simulate_withholds_a_study_that_fails_its_check(traced, tmp_path, capsys) -> None:
    path, _ = traced
    page = tmp_path / "scaling.html"
    args = ["--scenario", str(SCENARIO), "--calibrate", str(path), "--nodes", "4,8,64"]
    code, out, _ = _simulate(capsys, *args, "--set", "workload.fwd_ms=60", "--plot", str(page))
    assert code == 1
    check, withheld = out.strip().splitlines()
    assert check.startswith("simulator check at 4 nodes: ")
    assert withheld.startswith("predictions withheld: the model calibrated from the trace")
    assert "scaling study" not in out and "64" not in out.split("measured")[-1]
    text = page.read_text(encoding="utf-8")
    assert "predictions withheld: " in text and "plotly" not in text
    code, out, err = _simulate(capsys, *args, "--set", "workload.fwd_ms=60", "--json")
    payload = json.loads(out)
    assert code == 1 and payload["withheld"].startswith("predictions withheld: ")
    assert payload["check"]["mean_error"] > MEAN_TOLERANCE and "rows" not in payload
