"""Small untruths the CLI told: who arrives last, a damaged pacing setting, the host
counters trace-info did not mention, and an A/B verdict that read as a contradiction."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from syncpace.cli.main import main
from syncpace.trace import RankTraceWriter, schema
from syncpace.trace.hostwriter import host_paths, write_host_meta

DATA = Path(__file__).resolve().parents[1] / "data"
PACED = DATA / "demo" / "trace-paced"


def test_one_rank_last_in_every_step_is_not_taking_turns() -> None:
    from syncpace.analysis.detectors.arrival import who_is_last  # new: fails alone on main

    always = pl.DataFrame({"rank": [0, 1], "last_share": [0.0, 1.0]})
    assert who_is_last(always) == "rank 1 arrives last in 100% of iterations"
    mostly = pl.DataFrame({"rank": [0, 1, 2, 3], "last_share": [0.1, 0.7, 0.1, 0.1]})
    assert who_is_last(mostly) == "rank 1 arrives last in 70% of iterations"
    turns = pl.DataFrame({"rank": [0, 1, 2, 3], "last_share": [0.3, 0.3, 0.2, 0.2]})
    assert who_is_last(turns) == "4 of 4 ranks take turns arriving last (none in most iterations)"


@pytest.mark.parametrize(
    ("section", "key", "bad"),
    [
        ("policy_config", "max_delay_s", "abc"),
        ("policy_config", "max_delay_fraction", [1, 2]),
        ("ab", "confidence", {"x": 1}),
        ("ab", "throughput_gain", "nan"),
    ],
)
def test_a_damaged_pacing_setting_is_one_warning(section, key, bad, tmp_path, capsys) -> None:
    run = tmp_path / "run"
    shutil.copytree(PACED, run)
    meta_path = run / "rank-00000.meta.json"
    meta = json.loads(meta_path.read_text())
    where = meta["pacing"] if section == "pacing" else meta["pacing"][section]
    where[key] = bad
    meta_path.write_text(json.dumps(meta))
    warning = f"rank 0: the pacing metadata's {key} is not a number"
    for argv in (
        ["trace-info", str(run)],
        ["diagnose", str(run)],
        ["report", str(run), "-o", str(tmp_path / "r.html")],
    ):
        assert main(argv) == 0, argv
        out = capsys.readouterr()
        assert "Traceback" not in out.err, argv
        if argv[0] != "report":
            assert warning in out.out, argv
    assert main(["trace-info", str(run), "--json"]) == 0
    assert any(warning in w for w in json.loads(capsys.readouterr().out)["warnings"])


def test_trace_info_names_the_counters_the_run_holds(tmp_path, capsys) -> None:
    w = RankTraceWriter(tmp_path, 0, {"world_size": 1, "host": "h0"}, flush_interval_s=3600)
    w.close()
    meta_path, counters_path = host_paths(tmp_path, "h0")
    write_host_meta(meta_path, {"schema": schema.HOST_SCHEMA_NAME, "host": "h0"})
    rows = {
        "time_ns": [0, 2_000_000_000, 0, 2_000_000_000],
        "host": ["h0"] * 4,
        "source": ["nic", "nic", "tcp", "tcp"],
        "device": ["eth0", "eth0", "", ""],
        "port": [-1] * 4,
        "counter": ["rx_bytes", "rx_bytes", "RetransSegs", "RetransSegs"],
        "value": [0, 10, 0, 1],
    }
    table = pa.table(rows, schema=schema.COUNTERS)
    with pa.OSFile(str(counters_path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as s:
        s.write_table(table)
    assert main(["trace-info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "counters: host counters of 1 host (h0): nic, tcp; 2 series over 2.0 s" in out
    assert main(["trace-info", str(DATA / "demo" / "trace")]) == 0
    assert "link counters of the emulated fabric (fabric-links.arrow)" in capsys.readouterr().out


def test_an_untrusted_gain_is_not_called_no_benefit() -> None:
    from syncpace.report.format import ab_words, pacing_line  # ab_words is new

    p = {
        "policy": "early",
        "fraction_paced": 0.22,
        "delay_max_s": 0.05,
        "bound_s": 0.05,
        "ab_state": "no_help",
        "ab_confidence": 0.875,
        "ab_required": 0.9,
        "ab_throughput_gain": 0.164,
    }
    said = ab_words(p)
    assert said == (
        "A/B turned off: throughput +16% paced against unpaced, but too uncertain to keep "
        "(88% sure it is not chance, 90% needed)"
    )
    assert "no_help" not in pacing_line(p) and "no benefit" not in pacing_line(p)
    slower = ab_words({**p, "ab_throughput_gain": -0.03})
    assert slower == "A/B turned off: pacing did not help (throughput −3.0% paced against unpaced)"
