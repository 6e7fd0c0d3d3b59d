"""Reader: round trips, and every kind of damage gives one clear line naming the file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from syncpace.errors import TraceError
from syncpace.trace import RankTraceWriter, load_trace
from syncpace.trace.schema import SCHEMA_VERSION

WORLD = 3
EVENTS_PER_RANK = 40


def write_trace(root: Path, world: int = WORLD, offset: int = 0) -> Path:
    for rank in range(world):
        w = RankTraceWriter(
            root, rank, {"world_size": world, "host": f"node{rank // 2}"}, offset_ns=lambda: offset
        )
        for i in range(EVENTS_PER_RANK):
            w.add_event(
                (
                    rank,
                    i // 4,
                    "0",
                    world,
                    i,
                    "all_reduce",
                    1024,
                    "float32",
                    -1,
                    1000 * i,
                    1000 * i + 500,
                    "future",
                    "completed",
                    None,
                    -1,
                )
            )
            if i % 4 == 3:
                w.add_step((rank, i // 4, 1000 * (i - 3), 1000 * i + 600, 0))
        w.flush()  # two batches per stream, so truncation can keep a prefix
        w.add_event(
            (
                rank,
                10,
                "0",
                world,
                99,
                "barrier",
                0,
                "",
                -1,
                10**6,
                -1,
                "wait",
                "timed_out",
                "DistBackendError: Wait timeout after 1000 ms",
                10**6 + 5,
            )
        )
        w.close()
    return root


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("good"))


def test_round_trip(good):
    trace = load_trace(good)
    assert trace.world_size == WORLD and trace.ranks == [0, 1, 2]
    assert trace.events.height == WORLD * (EVENTS_PER_RANK + 1)
    assert trace.steps.height == WORLD * EVENTS_PER_RANK // 4
    assert trace.events.filter(trace.events["rank"] == 1)["seq"].to_list()[:3] == [0, 1, 2]
    assert trace.warnings == ()
    assert trace.meta[2]["events_written"] == EVENTS_PER_RANK + 1


def test_offset_is_applied_and_minus_one_kept(tmp_path):
    trace = load_trace(write_trace(tmp_path, world=1, offset=7))
    ev = trace.events
    assert ev["enter_ns"].to_list()[:2] == [7, 1007]
    assert ev["exit_ns"].to_list()[-1] == -1  # never observed stays "never observed"


def test_bounded_buffer_counts_drops(tmp_path):
    w = RankTraceWriter(
        tmp_path, 0, {"world_size": 1, "host": "h"}, max_buffered=5, flush_interval_s=60
    )
    for i in range(12):
        w.add_event(
            (0, 0, "0", 1, i, "all_reduce", 4, "float32", -1, i, i, "future", "completed", None, -1)
        )
    w.close()
    trace = load_trace(tmp_path)
    assert trace.events.height == 5
    assert trace.meta[0]["dropped_events"] == 7
    assert any("dropped 7 events" in x for x in trace.warnings)


def test_missing_rank_is_a_warning_or_an_error(tmp_path):
    root = write_trace(tmp_path)
    for f in root.glob("rank-00001.*"):
        f.unlink()
    trace = load_trace(root)
    assert trace.missing_ranks == [1]
    assert any("1 of 3 ranks have no trace files: 1" in w for w in trace.warnings)
    with pytest.raises(TraceError, match="1 of 3 ranks have no trace files"):
        load_trace(root, allow_missing_ranks=False)


def test_truncated_stream_keeps_complete_batches(tmp_path):
    root = write_trace(tmp_path)
    path = root / "rank-00000.events.arrow"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 200])
    trace = load_trace(root)
    kept = trace.events.filter(trace.events["rank"] == 0).height
    assert 0 < kept < EVENTS_PER_RANK + 1
    assert any("rank-00000.events.arrow: cut short" in w for w in trace.warnings)


@pytest.mark.parametrize(
    ("damage", "file", "message"),
    [
        ("empty", "rank-00002.events.arrow", "empty file"),
        ("garbage", "rank-00002.steps.arrow", "not an Arrow IPC stream"),
        ("empty", "rank-00001.meta.json", "empty metadata file"),
        ("garbage", "rank-00001.meta.json", "not valid JSON"),
        ("version", "rank-00000.meta.json", "reads versions 1, 2"),
        ("delete", "rank-00001.events.arrow", "missing"),
        ("rank", "rank-00002.meta.json", "named for rank 2 but says rank 0"),
    ],
)
def test_damaged_file_named_in_error(tmp_path, good, damage, file, message):
    root = tmp_path / "t"
    shutil.copytree(good, root)
    path = root / file
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(b"\x00garbage\xff" * 10)
    elif damage == "delete":
        path.unlink()
    elif damage == "version":
        meta = json.loads(path.read_text())
        meta["schema_version"] = 99
        path.write_text(json.dumps(meta))
    elif damage == "rank":
        meta = json.loads(path.read_text())
        meta["rank"] = 0
        path.write_text(json.dumps(meta))
    with pytest.raises(TraceError) as info:
        load_trace(root)
    assert str(path) in str(info.value)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("nothing", "no such directory"),
        ("file", "not a directory"),
        ("emptydir", "no syncpace trace here"),
    ],
)
def test_not_a_trace_directory(tmp_path, setup, message):
    target = tmp_path / "x"
    if setup == "file":
        target.write_text("hello")
    elif setup == "emptydir":
        target.mkdir()
    with pytest.raises(TraceError, match=message):
        load_trace(target)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    file=st.sampled_from(
        [
            "rank-00000.events.arrow",
            "rank-00001.steps.arrow",
            "rank-00002.meta.json",
            "rank-00001.events.arrow",
        ]
    ),
    cut=st.floats(min_value=0.0, max_value=1.0),
    noise=st.binary(max_size=64),
    flip=st.integers(min_value=0, max_value=10_000),
)
def test_any_damage_is_a_clean_error_or_a_warning(tmp_path_factory, good, file, cut, noise, flip):
    """Truncation, appended junk or a flipped byte anywhere: never an unexpected exception."""
    root = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(good, root, dirs_exist_ok=True)
    path = root / file
    data = bytearray(path.read_bytes())
    data = data[: int(len(data) * cut)] + noise
    if data:
        data[flip % len(data)] ^= 0xFF
    path.write_bytes(bytes(data))
    try:
        trace = load_trace(root)
    except TraceError as exc:
        assert str(root) in str(exc)
        assert "\n" not in str(exc)
    else:
        assert trace.world_size == WORLD


@pytest.mark.slow
def test_cli_prints_one_line_and_exits_2(tmp_path, good):
    root = tmp_path / "t"
    shutil.copytree(good, root)
    (root / "rank-00001.meta.json").write_text("{not json")
    proc = subprocess.run(
        [sys.executable, "-m", "syncpace", "trace-info", str(root)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "rank-00001.meta.json" in lines[0] and "not valid JSON" in lines[0]
    assert "Traceback" not in proc.stderr


def test_status_error_and_wait_survive_the_round_trip(good):
    events = load_trace(good).events
    last = events.filter(events["op"] == "barrier")
    assert last["status"].to_list() == ["timed_out"] * WORLD
    assert last["error"].to_list() == ["DistBackendError: Wait timeout after 1000 ms"] * WORLD
    assert last["wait_ns"].to_list() == [10**6 + 5] * WORLD
    assert events.filter(events["op"] == "all_reduce")["status"].unique().to_list() == ["completed"]


def test_version_1_traces_are_read_with_status_derived():
    v1 = Path(__file__).resolve().parents[1] / "data" / "real_ddp_straggler"
    trace = load_trace(v1)
    assert {m["schema_version"] for m in trace.meta.values()} == {1}
    events = trace.events
    observed = events.filter(events["exit_ns"] >= 0)
    assert observed.height > 0
    assert observed["status"].unique().to_list() == ["completed"]
    assert events.filter(events["exit_ns"] < 0)["status"].unique().to_list() in ([], ["unobserved"])
    assert events["error"].null_count() == events.height
    assert events["wait_ns"].unique().to_list() == [-1]


def test_a_newer_schema_version_is_refused_in_one_line(good, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(good, run)
    meta_path = run / "rank-00001.meta.json"
    meta = json.loads(meta_path.read_text())
    meta["schema_version"] = SCHEMA_VERSION + 1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(
        TraceError,
        match=rf"rank-00001.meta.json: trace schema version {SCHEMA_VERSION + 1} is not "
        r"supported \(this syncpace reads versions 1, 2, 3, 4\)",
    ):
        load_trace(run)
