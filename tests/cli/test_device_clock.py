"""Every output says which clock its figures come from: trace-info (text and JSON),
diagnose --json, the terminal summary and the HTML report."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tests.device_traces import MS, US, DeviceRun, write_device_run

from syncpace.analysis import analyze
from syncpace.cli.main import main
from syncpace.report.html import render_html

#: Rank 1's GPU is 30 ms slow, its CPU 65 ms ahead of it; rank 2's device waits on its
#: CPU (50 µs behind it); the others' CPUs run 15 ms ahead.
RUN = DeviceRun(device_delay={1: 30 * MS, 2: 12 * MS}, run_ahead={1: 65 * MS, 2: 50 * US})
LABEL = "device (CUDA events, ±12 µs)"


@pytest.fixture
def device_run(tmp_path: Path) -> Path:
    return write_device_run(tmp_path / "device", RUN)


@pytest.fixture
def mixed_run(tmp_path: Path) -> Path:
    return write_device_run(tmp_path / "mixed", dataclasses.replace(RUN, lacking={(0, 4)}))


def test_trace_info_json_carries_the_clock_and_the_run_ahead(device_run: Path, capsys) -> None:
    assert main(["trace-info", str(device_run), "--json"]) == 0
    base = json.loads(capsys.readouterr().out)["time_base"]
    # every duration of the JSON in ms (docs/report.md)
    assert (base["clock"], base["label"], base["uncertainty_ms"]) == ("device", LABEL, 0.012)
    assert (base["calls"], base["calls_without_device_time"]) == (88, 0)
    assert base["run_ahead_ms"] == {
        "0": {"p50": 15.0, "p90": 15.0},
        "1": {"p50": 65.0, "p90": 65.0},
        "2": {"p50": 0.05, "p90": 0.05},
        "3": {"p50": 15.0, "p90": 15.0},
    }


def test_trace_info_text_says_the_clock(device_run: Path, mixed_run: Path, capsys) -> None:
    assert main(["trace-info", str(device_run)]) == 0
    out = capsys.readouterr().out
    assert f"clock of the figures: {LABEL}" in out
    assert "r1 65.00 (65.00)" in out and "r2 0.05 (0.05)" in out
    assert main(["trace-info", str(mixed_run)]) == 0
    out = capsys.readouterr().out
    assert "clock of the figures: host (2 of 88 calls lacked device time" in out


def test_diagnose_json_carries_the_clock(device_run: Path, mixed_run: Path, capsys) -> None:
    assert main(["diagnose", str(device_run), str(mixed_run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    device, mixed = (r["time_base"] for r in data["metrics"]["runs"])
    assert device["clock"] == "device" and device["label"] == LABEL
    assert device["figures"]["transfers, service time, busbw"] == LABEL
    assert device["figures"]["hang view"] == "host"
    assert device["run_ahead_ms"]["1"] == {"p50": 65.0, "p90": 65.0}
    assert device["host_lateness_p50_ms"]["1"] == 0.0  # it enqueues first
    assert mixed["clock"] == "host" and mixed["calls_without_device_time"] == 2
    assert mixed["note"].startswith("2 of 88 calls lacked device time")
    sides = {
        tuple(f["ranks"]): f["evidence"]["late_side"]
        for f in data["findings"]
        if f["mode"] == "straggler" and f["run"] == str(device_run)
    }
    assert sides == {(1,): {"1": "slow GPU"}, (2,): {"2": "late CPU"}}


def test_diagnose_terminal_says_the_clock(device_run: Path, capsys) -> None:
    assert main(["diagnose", str(device_run)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"clock of the figures: {LABEL}" in out
    assert "a slow GPU on rank 1" in out and "a late CPU on rank 2" in out
    assert "times on the device clock" in out


def test_the_html_report_says_the_clock(device_run: Path) -> None:
    page = render_html(analyze([str(device_run)]), plotly_js="plotly.js")
    assert "clock of the figures" in page
    assert LABEL in page
    assert "CPU ahead of the device (median)" in page
