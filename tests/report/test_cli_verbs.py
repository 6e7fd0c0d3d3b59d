"""The diagnose, report and export verbs, end to end through the CLI entry point."""

from __future__ import annotations

import json
import os
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


def _bench(path, fits) -> None:
    path.mkdir(parents=True, exist_ok=True)
    data = {"schema": "syncpace.bench", "schema_version": 1, "world_size": 4, "fits": fits}
    (path / "bench.json").write_text(json.dumps(data))


def test_diagnose_takes_the_link_rate_from_a_bench_result(tmp_path, capsys):
    """Contention over the whole run is invisible against the run's own best transfer;
    the bench's bus bandwidth (measured on the same fabric) makes it visible."""
    from planted import SCENARIOS, generate

    sc = SCENARIOS["fabric_contention"].replace(steps=12, cross_inflation=(2.5, 2.6))
    run = generate(sc, tmp_path / "run")
    _bench(tmp_path / "bench", {"all_reduce": {"op": "all_reduce", "beta_gbps": 80.0}})

    def modes(*extra: str) -> set[str]:
        assert main(["diagnose", str(run), "--json", *extra]) == 0
        return {f["mode"] for f in json.loads(capsys.readouterr().out)["findings"]}

    assert "fabric_contention" not in modes()
    assert "fabric_contention" in modes("--bench", str(tmp_path / "bench"))
    # an explicit link rate wins over the bench's (1 GB/s: the run's own best is faster)
    assert "fabric_contention" not in modes("--bench", str(tmp_path / "bench"), "--link-gbps", "1")


def test_diagnose_names_a_bench_result_without_a_fit(tmp_path, capsys):
    _bench(tmp_path / "bench", {})
    assert main(["diagnose", str(DATA / "healthy"), "--bench", str(tmp_path / "bench")]) == 2
    err = capsys.readouterr().err
    assert "bench: the benchmark has no bus bandwidth fit" in err
    assert main(["diagnose", str(DATA / "healthy"), "--bench", str(tmp_path / "none")]) == 2
    assert "no benchmark results here" in capsys.readouterr().err


def test_diagnose_refuses_a_bench_that_is_not_a_regular_file(tmp_path, capsys):
    """A device or a FIFO named as the benchmark is refused in one line, not read
    (``/dev/zero`` was read until the memory ran out)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in (("/dev/zero", "character device"), (str(fifo), "FIFO")):
        assert main(["diagnose", str(DATA / "healthy"), "--bench", path]) == 2
        err = capsys.readouterr().err
        assert f"{path}: is a {kind}, not a regular file" in err
        assert len(err.strip().splitlines()) == 1
