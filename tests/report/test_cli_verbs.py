"""The diagnose, report and export verbs, end to end through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncpace.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"


def test_diagnose_json(capsys) -> None:
    assert main(["diagnose", str(DATA / "straggler"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    top = data["findings"][0]
    assert (top["mode"], top["ranks"], top["nodes"]) == ("straggler", [5], ["node1"])
    assert data["metrics"]["runs"][0]["world_size"] == 8


def test_diagnose_terminal_summary(capsys) -> None:
    assert main(["diagnose", str(DATA / "poor_overlap"), str(DATA / "healthy")]) == 0
    out = capsys.readouterr().out
    assert "poor_overlap" in out and "healthy" in out and "flat topology" in out


def test_thresholds_are_flags(capsys) -> None:
    args = ["diagnose", str(DATA / "straggler"), "--json", "--straggler-min-share", "0.5"]
    assert main(args) == 0
    modes = [f["mode"] for f in json.loads(capsys.readouterr().out)["findings"]]
    assert "straggler" not in modes


@pytest.mark.parametrize(
    "argv",
    [
        ["diagnose", "/no/such/run"],
        ["diagnose", str(DATA / "healthy"), "--critical-cost", "lots"],
        ["diagnose", str(DATA / "healthy"), "--warmup-steps", "-1"],
        ["report", "/no/such/run", "-o", "/tmp/never.html"],
        ["export", "--perfetto", "/no/such/run"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error:" in err


def test_report_and_export_write_files(tmp_path: Path, capsys) -> None:
    html = tmp_path / "r.html"
    assert main(["report", str(DATA / "healthy"), str(DATA / "straggler"), "-o", str(html)]) == 0
    assert html.stat().st_size > 1_000_000  # plotly.js inline
    trace = tmp_path / "t.json"
    assert main(["export", "--perfetto", str(DATA / "healthy"), "-o", str(trace)]) == 0
    assert json.loads(trace.read_text())["traceEvents"]
