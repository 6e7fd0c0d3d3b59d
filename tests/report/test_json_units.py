"""Every JSON the command line prints: one unit per quantity, said in its key, and a
schema version (docs/report.md, "JSON")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from syncpace.analysis import analyze
from syncpace.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"
DEMO = [str(DATA / "demo" / "trace"), str(DATA / "demo" / "trace-paced")]

#: A key naming a duration unit other than ms, or GB/s as "gbps".
OTHER_UNIT = re.compile(r"(^|_)(ns|us|s|sec|seconds)($|_)|gbps")


def _keys(value, path=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield f"{path}.{k}", str(k)
            yield from _keys(v, f"{path}.{k}")
    elif isinstance(value, list):
        for v in value:
            yield from _keys(v, f"{path}[]")


def _json_of(capsys, *argv: str) -> dict:
    assert main(list(argv)) in (0, 1)
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "argv",
    [
        ["diagnose", *DEMO, "--json"],
        ["trace-info", DEMO[1], "--json"],
        ["simulate", "--nodes", "2", "--steps", "5", "--json"],
    ],
    ids=["diagnose", "trace-info", "simulate"],
)
def test_one_unit_per_quantity_and_a_schema_version(argv, capsys) -> None:
    data = _json_of(capsys, *argv)
    assert data.get("schema_version") == 2 and data["units"]["durations"] == "ms"
    other = sorted(
        {path for path, key in _keys(data) if OTHER_UNIT.search(key.replace("_per_s", ""))}
    )
    assert not other, other[:10]


def test_diagnose_durations_are_milliseconds(capsys) -> None:
    data = _json_of(capsys, "diagnose", DEMO[0], "--json")
    run = data["metrics"]["runs"][0]
    # the iteration the terminal prints as 487 ms, and its p99 as 690 ms
    assert round(run["iteration_ms"]["mean"]) == 487 and round(run["iteration_ms"]["p99"]) == 690
    assert run["iteration_ms"]["count"] == 43 and 0.2 < run["iteration_ms"]["cv"] < 0.23
    ops = {o["op"]: o for o in run["collectives_by_op"]}
    # GB/s as the key says: the median of the calls' busbw the analysis measured (those
    # the physics allows), below the demo's 100 Mbit/s links (0.0125 GB/s)
    instances = analyze(DEMO[0]).runs[0].instances
    measured = instances.filter(pl.col("op") == "all_reduce")["busbw_gbps"].drop_nulls()
    p50 = ops["all_reduce"]["busbw_gbytes_per_s_p50"]
    assert p50 == pytest.approx(measured.median(), rel=1e-6) and 0.001 < p50 < 0.0125
    # a quantity the analysis already kept in ms is not scaled twice
    what_if = data["what_if"][0]
    assert what_if["replay"]["measured_iteration_ms"] == pytest.approx(
        run["iteration_ms"]["mean"], rel=1e-3
    )


def test_rename_and_scale() -> None:
    from syncpace.report.jsonout import SCHEMA_VERSION, normalise, rename

    assert SCHEMA_VERSION == 2
    assert rename("lateness_p50_ns") == ("lateness_p50_ms", 1e-6)
    assert rename("comm_ns_per_step") == ("comm_ms_per_step", 1e-6)
    assert rename("max_delay_s") == ("max_delay_ms", 1e3)
    assert rename("throughput_steps_per_s") == ("throughput_steps_per_s", None)
    assert rename("busbw_gbps_p50") == ("busbw_gbytes_per_s_p50", None)
    stats = {"mean": 2e6, "cv": 0.5, "count": 3, "share_late": 0.25}
    assert normalise({"skew_ns": stats, "ranks": [1]}) == {
        "skew_ms": {"mean": 2.0, "cv": 0.5, "count": 3, "share_late": 0.25},
        "ranks": [1],
    }
