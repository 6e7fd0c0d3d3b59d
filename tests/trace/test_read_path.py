"""One read path: the loader, the streaming scan and the Perfetto export read a rank's
events through one loop, so a file of any version reads the same in each."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from syncpace.analysis.metrics import compute_metrics
from syncpace.analysis.streaming import same_metrics, stream_metrics
from syncpace.report.perfetto import export_perfetto
from syncpace.trace import RankTraceWriter, schema
from syncpace.trace.read.index import scan_rank
from syncpace.trace.read.meta import read_metadata
from syncpace.trace.read.window import read_window
from syncpace.trace.reader import load_trace
from syncpace.trace.segments import RotationPolicy

SRC = Path(__file__).resolve().parents[2] / "src" / "syncpace"
#: A real run written by schema version 1 (no status, error, wait or device columns).
V1 = Path(__file__).resolve().parents[1] / "data" / "real_ddp_straggler"


def _v1_to_v3(run: Path, rank: int) -> None:
    """Rank ``rank``'s files rewritten as the current writer writes them: the version-1
    columns with what version 3 added (as the format says older files read), each
    batch checksummed, and its metadata saying version 3."""
    stem = run / schema.rank_stem(rank)
    for suffix, upgrade, target in (
        (schema.EVENTS_SUFFIX, schema.upgrade_events, schema.EVENTS),
        (schema.STEPS_SUFFIX, schema.upgrade_steps, schema.STEPS),
    ):
        path = Path(f"{stem}{suffix}")
        old = pa.ipc.open_stream(pa.py_buffer(path.read_bytes())).read_all()
        table = upgrade(old, 1).select(target.names).cast(target)
        with pa.ipc.new_stream(path, target) as out:
            for batch in table.combine_chunks().to_batches():
                out.write_batch(batch, custom_metadata={"crc32": _checksum(batch)})
    meta_path = Path(f"{stem}{schema.META_SUFFIX}")
    meta = json.loads(meta_path.read_text())
    meta["schema_version"] = schema.SCHEMA_VERSION
    meta_path.write_text(json.dumps(meta))


def _checksum(batch: pa.RecordBatch) -> str:
    """The CRC-32 a reader finds for ``batch`` once written (its all-null columns keep
    their validity bitmap, which :func:`schema.batch_checksum` of the table in memory
    would not sum as the file holds it)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as out:
        out.write_batch(batch)
    return schema.decoded_checksum(pa.ipc.open_stream(sink.getvalue()).read_next_batch())


def _ordered(events: pl.DataFrame) -> pl.DataFrame:
    return events.sort(["rank", "group", "op", "peer", "seq"])


def test_a_version_1_run_reads_the_same_in_the_loader_and_the_scan() -> None:
    """The loader and the two-pass scan hand on the same rows, in the current schema's
    columns and order, with version 1's status derived from its exit times."""
    trace = load_trace(V1)
    assert trace.events.columns == schema.EVENTS.names
    index = read_metadata(V1)
    scans = [scan_rank(index, rank) for rank in index.ranks]
    last = int(trace.events["step"].max())
    window = pl.from_arrow(read_window(scans, 0, last + 1, columns=tuple(schema.EVENTS.names)))
    assert isinstance(window, pl.DataFrame)
    assert window.columns == schema.EVENTS.names
    assert _ordered(window).equals(_ordered(trace.events), null_equal=True)
    unobserved = trace.events.filter(pl.col("exit_ns") < 0)["status"].unique().to_list()
    assert unobserved in ([], ["unobserved"])


def test_a_run_of_two_versions_loads_streams_and_exports(tmp_path: Path) -> None:
    """Ranks written by versions 1 and 3 side by side (one job's nodes upgraded one at a
    time): every reader puts them in one table, and each rank reads as it did alone."""
    run = tmp_path / "run"
    shutil.copytree(V1, run)
    _v1_to_v3(run, 3)
    trace = load_trace(run)
    alone = load_trace(V1)
    assert _ordered(trace.events).equals(_ordered(alone.events), null_equal=True)
    assert trace.steps.sort(["rank", "step"]).equals(alone.steps.sort(["rank", "step"]))
    expected = compute_metrics(trace)
    streamed, _ = stream_metrics(run, window_events=1)
    assert same_metrics(expected, streamed) == []
    result = export_perfetto(run, tmp_path / "trace.json")
    written = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    slices = [e for e in written if e.get("cat") == "collective" and e["ph"] == "b"]
    assert result.events == len(slices) == alone.events.height
    assert {e["pid"] for e in slices} == set(range(4))


def test_a_dead_always_on_rank_is_recovered_from_its_journal(tmp_path: Path) -> None:
    """A rank traced in always-on mode (its events in segments) that died: what its
    journal holds beyond the last segment is recovered, as for a rank with one file."""

    def call(i: int) -> tuple:
        enter = 1000 * i
        return (0, i // 8, "g", 1, i, "all_reduce", 64, "bfloat16", -1, enter, enter + 500)

    policy = RotationPolicy(segment_s=1e-9, keep_s=0, budget_bytes=10**9)
    w = RankTraceWriter(
        tmp_path / "run",
        0,
        {"world_size": 1, "host": "h"},
        journal_slots=256,
        flush_interval_s=3600,
        rotation=policy,
        summaries=True,
    )
    for i in range(50):
        w.add_event((*call(i), "future", "completed", None, -1))
        if i % 8 == 7 and i < 40:
            w.add_step((0, i // 8, 0, 1000 * i + 900, 0))
            w.flush()  # 0..39 in segments, 40..49 in the journal only
    crashed = tmp_path / "crashed"
    shutil.copytree(w.dir, crashed)
    w.close()
    assert len(list(crashed.glob("rank-00000.events.*.arrow"))) > 1
    trace = load_trace(crashed)
    assert trace.events["seq"].to_list() == list(range(50))
    assert trace.completeness[0].events_recovered == 10
    assert any("10 events and 0 steps recovered" in x for x in trace.warnings)


def _calls(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == name
    )


@pytest.mark.parametrize("name", ["upgrade_events", "events_schema"])
def test_events_files_are_opened_and_upgraded_in_one_place(name: str) -> None:
    """Outside the schema itself, one module opens events files by their version's
    schema and upgrades what they hold: the per-rank loop every reader runs."""
    callers = sorted(
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if p.name != "schema.py" and _calls(p, name)
    )
    assert callers == ["trace/read/rank.py"]
