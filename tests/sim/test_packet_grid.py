"""benchmarks/packet_grid.py takes what a grid run recorded: each point's real median
transfer and the congestion control its fabric's hosts ran (read back from them)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "packet_grid.py"


@pytest.fixture(scope="module")
def packet_grid():
    spec = importlib.util.spec_from_file_location("packet_grid", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(point: str, transfer_ms: float, fabric: dict | None) -> dict:
    setup = {"bench": {}} if fabric is None else {"bench": {}, "fabric": fabric}
    return {"point": point, "real": {"transfer_ms": transfer_ms}, "setup": setup}


def test_each_point_takes_its_recorded_median_and_tcp(packet_grid, tmp_path):
    path = tmp_path / "validation.json"
    rows = [
        row("star4", 66.1, {"rate_bps": 50_000_000, "congestion_control": "reno"}),
        row("star4-contended", 180.5, {"rate_bps": 50_000_000, "congestion_control": "bbr"}),
        row("ls4", 66.6, None),  # a grid from before the fabric recorded it
    ]
    path.write_text(json.dumps({"rows": rows}))
    assert packet_grid.recorded(str(path)) == {
        "star4": (66.1, "newreno"),  # Linux's reno is ns-3's NewReno
        "star4-contended": (180.5, "bbr"),
        "ls4": (66.6, ""),
    }


def test_a_file_that_is_no_grid_output_stops_with_one_line(packet_grid, tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"rows": [row("star4", 66.1, {"congestion_control": "vegas"})]}))
    with pytest.raises(SystemExit, match=f"{path}: not a validation grid's output") as err:
        packet_grid.recorded(str(path))
    assert "\n" not in str(err.value)
