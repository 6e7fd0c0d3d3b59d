"""``diagnose_runs``, the whole diagnosis: its contract, each part of it on its own.

The same result as the command line's is checked on the demo's runs in
``tests/demo/test_report_like_cli.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncpace.analysis import Thresholds
from syncpace.cli.diagnose import settings_from_args
from syncpace.cli.main import build_parser
from syncpace.control import PacingConfig
from syncpace.diagnose import DiagnoseSettings, diagnose_runs, pacer_factory
from syncpace.diagnose.api import with_bench_link
from syncpace.errors import ConfigError, SyncpaceError

DATA = Path(__file__).resolve().parents[1] / "data"
T0 = 1_764_590_000_000_000_000


def _bench(path: Path, fit: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    data = {"schema": "syncpace.bench", "schema_version": 1, "world_size": 4}
    (path / "bench.json").write_text(json.dumps({**data, "fits": {"all_reduce": fit}}))
    return path


def _dumps(path: Path) -> Path:
    """Flight Recorder dumps of 4 ranks (the fields torch 2.13 writes that the reader
    needs): ranks 0, 1, 3 wait in all_reduce seq 2, rank 2 never entered it."""
    path.mkdir()
    for rank in range(4):
        entries = []
        for seq in range(3 if rank != 2 else 2):
            done = seq < 2
            entries.append(
                {
                    "process_group": ("0", "default_pg"),
                    "collective_seq_id": seq + 1,
                    "p2p_seq_id": 0,
                    "profiling_name": "nccl:all_reduce",
                    "time_created_ns": T0 + seq * 1000,
                    "time_discovered_completed_ns": T0 + seq * 1000 + 100 if done else None,
                    "input_sizes": [[1024]],
                    "input_dtypes": ["Float"],
                    "output_sizes": [[1024]],
                    "output_dtypes": ["Float"],
                    "state": "completed" if done else "started",
                    "retired": done,
                    "frames": [],
                }
            )
        dump = {
            "version": "2.10",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
            "entries": entries,
        }
        (path / f"nccl_trace_rank_{rank}").write_text(json.dumps(dump))
    return path


def test_the_defaults_are_the_commands_with_no_flag():
    for verb in ("diagnose", "report"):
        args = build_parser().parse_args([verb, str(DATA / "healthy")])
        assert settings_from_args(args) == DiagnoseSettings()


def test_flags_land_in_the_settings():
    argv = ["diagnose", "x", "--warmup-steps", "3", "--bench", "b", "--comm-share", "0.3"]
    settings = settings_from_args(build_parser().parse_args(argv))
    assert settings == DiagnoseSettings(
        warmup_steps=3, bench="b", thresholds=Thresholds(comm_share=0.3)
    )


def test_one_run_alone_or_in_a_list_and_no_settings_are_the_defaults():
    one = diagnose_runs(DATA / "straggler")
    listed = diagnose_runs([str(DATA / "straggler")], DiagnoseSettings())
    assert json.dumps(one.to_json(), default=str) == json.dumps(listed.to_json(), default=str)
    assert (one.top.mode, one.top.ranks) == ("straggler", (5,))


def test_every_run_has_the_pacing_row_of_the_pacer_it_is_given(monkeypatch):
    seen: list[PacingConfig] = []
    real = pacer_factory

    def recording(config: PacingConfig):
        seen.append(config)
        return real(config)

    monkeypatch.setattr("syncpace.diagnose.api.pacer_factory", recording)
    config = PacingConfig(strategy="early")
    analysis = diagnose_runs([DATA / "straggler"], DiagnoseSettings(pacing=config))
    assert seen == [config]
    (table,) = analysis.what_if
    assert table is not None and "pacing" in [r.name for r in table.rows]
    assert pacer_factory(config)(8).config is config


def test_a_bench_result_gives_the_link_rate_the_thresholds_leave_unset(tmp_path):
    bench = _bench(tmp_path / "bench", {"beta_gbps": 80.0, "alpha_us": 12.0})
    assert with_bench_link(Thresholds(), bench) == Thresholds(link_gbps=80.0, link_alpha_us=12.0)
    assert with_bench_link(Thresholds(link_alpha_us=3.0), bench) == Thresholds(
        link_gbps=80.0, link_alpha_us=3.0
    )
    own = Thresholds(link_gbps=5.0)
    assert with_bench_link(own, bench) is own
    assert with_bench_link(own, None) is own


def test_a_bench_without_a_fit_fails_before_any_run_is_read(tmp_path):
    bench = _bench(tmp_path / "bench", {"alpha_us": 12.0})
    with pytest.raises(ConfigError, match="no bus bandwidth fit"):
        diagnose_runs([tmp_path / "no-such-run"], DiagnoseSettings(bench=bench))


def test_flight_recorder_dumps_are_read_as_a_run(tmp_path):
    analysis = diagnose_runs([_dumps(tmp_path / "dumps")])
    assert (analysis.top.mode, analysis.top.ranks) == ("hang", (2,))


@pytest.mark.parametrize(
    ("runs", "settings"),
    [([], None), ([DATA / "healthy"], {"warmup_steps": -1}), ("/no/such/run", None)],
)
def test_bad_input_is_a_syncpace_error(runs, settings):
    with pytest.raises(SyncpaceError):
        diagnose_runs(runs, DiagnoseSettings(**settings) if settings else None)
