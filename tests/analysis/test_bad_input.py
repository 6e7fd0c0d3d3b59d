"""Bad input becomes a finding or one clean SyncpaceError, never a crash."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from syncpace.analysis import Severity, Thresholds, analyze
from syncpace.errors import ConfigError, SyncpaceError
from syncpace.trace import schema

DATA = Path(__file__).resolve().parents[1] / "data"
MS = 1_000_000


def _rewrite_events(path: Path, change) -> None:
    # read into memory: rewriting a file that is still memory-mapped raises SIGBUS
    table = pa.ipc.open_stream(pa.py_buffer(path.read_bytes())).read_all()
    table = change(table)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)


def _modes(analysis) -> dict[str, object]:
    return {f.mode: f for f in analysis.findings}


def test_missing_ranks_are_a_finding(fixture_copy) -> None:
    run = fixture_copy("straggler")
    for f in run.glob("rank-00003.*"):
        f.unlink()
    modes = _modes(analyze(run))
    incomplete = modes["incomplete_trace"]
    assert incomplete.severity == Severity.WARNING
    assert incomplete.ranks == (3,)
    assert incomplete.evidence["missing_ranks"] == [3]
    assert modes["straggler"].ranks == (5,)  # the rest of the analysis still works


def test_unmatched_sequence_numbers_are_a_finding(fixture_copy) -> None:
    run = fixture_copy("healthy")
    path = run / f"{schema.rank_stem(2)}{schema.EVENTS_SUFFIX}"

    def shift_seq(t: pa.Table) -> pa.Table:
        seq = pa.compute.add(t.column("seq"), 1)
        return t.set_column(t.schema.get_field_index("seq"), "seq", seq)

    _rewrite_events(path, shift_seq)
    incomplete = _modes(analyze(run))["incomplete_trace"]
    assert incomplete.severity == Severity.WARNING
    assert incomplete.evidence["incomplete_instances"] > 0


def test_clock_uncertainty_above_the_skews_is_a_finding(fixture_copy) -> None:
    run = fixture_copy("straggler")
    for meta_path in run.glob("*.meta.json"):
        meta = json.loads(meta_path.read_text())
        meta["clock"]["uncertainty_ns"] = 50 * MS
        meta_path.write_text(json.dumps(meta))
    modes = _modes(analyze(run))
    clock = modes["clock_uncertainty"]
    assert clock.evidence["clock_uncertainty_ns"] == 50 * MS
    assert clock.evidence["median_skew_ns"] < 50 * MS
    assert modes["straggler"].confidence == pytest.approx(0.5)  # halved: skews untrusted


def test_never_observed_exits_do_not_crash(fixture_copy) -> None:
    run = fixture_copy("healthy")
    path = run / f"{schema.rank_stem(1)}{schema.EVENTS_SUFFIX}"

    def drop_exits(t: pa.Table) -> pa.Table:
        minus_one = pa.array([-1] * t.num_rows, pa.int64())
        return t.set_column(t.schema.get_field_index("exit_ns"), "exit_ns", minus_one)

    _rewrite_events(path, drop_exits)
    assert analyze(run).findings


def test_trace_without_events_or_with_one_rank(make_trace) -> None:
    steps = {0: [(0, s, s * 10 * MS, (s + 1) * 10 * MS) for s in range(5)]}
    analysis = analyze(make_trace({}, steps))
    assert analysis.top.mode == "healthy"
    assert analysis.runs[0].iteration["mean"] == 10 * MS


def test_no_such_directory_is_a_clean_error(tmp_path: Path) -> None:
    with pytest.raises(SyncpaceError, match="no such directory"):
        analyze(tmp_path / "nope")


@pytest.mark.parametrize(
    "bad",
    [{"critical_cost": -1.0}, {"warning_cost": 0.5, "critical_cost": 0.1}, {"sync_spread": 2.0}],
)
def test_thresholds_are_validated(bad: dict) -> None:
    with pytest.raises(ConfigError):
        Thresholds(**bad)


CORRUPTIONS = st.sampled_from(["truncate", "garbage", "delete", "bad_json", "world_size", "empty"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=CORRUPTIONS,
    rank=st.integers(0, 7),
    which=st.sampled_from(["events", "steps", "meta"]),
    cut=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
# garbage in a steps file whose steps then span more than int64: the sweep's windows
@example(kind="garbage", rank=0, which="steps", cut=0.625, seed=0)
def test_random_corruption_is_a_finding_or_a_clean_error(kind, rank, which, cut, seed) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(DATA / "healthy", run)
        suffix = {
            "events": schema.EVENTS_SUFFIX,
            "steps": schema.STEPS_SUFFIX,
            "meta": schema.META_SUFFIX,
        }[which]
        path = run / f"{schema.rank_stem(rank)}{suffix}"
        data = path.read_bytes()
        if kind == "truncate":
            path.write_bytes(data[: int(len(data) * cut)])
        elif kind == "garbage":
            at = int(len(data) * cut)
            noise = bytes((seed * 7 + i * 13) % 256 for i in range(64))
            path.write_bytes(data[:at] + noise + data[at + 64 :])
        elif kind == "delete":
            path.unlink()
        elif kind == "bad_json":
            path.write_text("{not json")
        elif kind == "world_size":
            meta_path = run / f"{schema.rank_stem(rank)}{schema.META_SUFFIX}"
            meta = json.loads(meta_path.read_text())
            meta["world_size"] = 4 + seed % 8
            meta_path.write_text(json.dumps(meta))
        else:
            path.write_bytes(b"")
        try:
            analysis = analyze(run)
        except SyncpaceError:
            return
        assert analysis.findings
