"""The streaming analysis against the in-memory one: the same numbers, exactly, on
every saved fixture, with windows of one step (every boundary crossed) and of the
default size; and the same errors, warnings and accounts on damaged files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from syncpace.analysis.frames import ANALYSIS_COLUMNS
from syncpace.analysis.metrics import RunMetrics, compute_metrics
from syncpace.analysis.streaming import needs_whole_run, same_metrics, stream_metrics
from syncpace.analysis.timeline import sample_iterations
from syncpace.errors import TraceError
from syncpace.trace import RankTraceWriter, schema
from syncpace.trace.read.meta import rank_files, read_metadata
from syncpace.trace.read.sweep import OutOfOrder, Sweep
from syncpace.trace.reader import load_trace
from syncpace.trace.segments import RotationPolicy

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = sorted(p.name for p in DATA.iterdir() if p.is_dir() and any(p.glob("rank-*.meta.json")))


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("window_events", [1, 1_000_000])
def test_streamed_metrics_equal_the_loaded_ones(name: str, window_events: int) -> None:
    trace = load_trace(DATA / name)
    expected = compute_metrics(trace)
    got, sample = stream_metrics(DATA / name, window_events=window_events)
    assert same_metrics(expected, got) == []
    assert got.quality["events"] == trace.events.height > 0
    want = sample_iterations(trace, expected)
    assert sample.picks == want.picks
    assert sample.steps.equals(want.steps)
    assert sample.events.equals(want.events)


def test_warm_up_and_windows_split_the_run() -> None:
    """With no warm-up the first step is analysed too; windows of one step each."""
    trace = load_trace(DATA / "straggler")
    expected = compute_metrics(trace, warmup_steps=0)
    got, _ = stream_metrics(DATA / "straggler", warmup_steps=0, window_events=1)
    assert same_metrics(expected, got) == []
    assert got.steps.height == trace.steps["step"].n_unique()


@pytest.mark.parametrize("where", [0.1, 0.35, 0.5, 0.8, 0.97])
def test_damage_is_met_as_the_loader_meets_it(tmp_path: Path, where: float) -> None:
    """A flipped byte in a rank's events: a checksum failure, a cut or a one-line error,
    the same in both paths (same message, same warnings, same numbers)."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "straggler", run)
    path = run / "rank-00001.events.arrow"
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0x5A
    path.write_bytes(bytes(data))
    try:
        trace = load_trace(run)
    except TraceError as exc:
        with pytest.raises(TraceError) as streamed:
            stream_metrics(run)
        assert str(streamed.value) == str(exc)
        return
    expected = compute_metrics(trace)
    got, _ = stream_metrics(run, window_events=1)
    assert got.warnings == expected.warnings
    # The hang view reads only the last window (where a run that stopped has its last
    # calls); a rank whose data was cut earlier stopped before it: not yet streamed.
    assert set(same_metrics(expected, got)) <= {"hang"}


def test_missing_events_file_is_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / "healthy", run)
    (run / "rank-00002.events.arrow").unlink()
    with pytest.raises(TraceError, match="rank-00002.events.arrow: missing"):
        stream_metrics(run)


def _rewrite(run: Path, rank: int, edit, cuts: tuple[int, ...] = ()) -> None:
    """Rewrite one rank's events as ``edit`` (a polars frame -> frame) makes them, as
    the writer writes them (a CRC-32 per batch; batches cut at ``cuts``), and declare
    the new count in its metadata."""
    path = run / f"rank-{rank:05d}.events.arrow"
    frame = edit(pl.from_arrow(pa.ipc.open_stream(pa.py_buffer(path.read_bytes())).read_all()))
    table = schema.events_table(frame.to_arrow())
    bounds = [0, *cuts, table.num_rows]
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema.EVENTS) as out:
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            batch = pa.ipc.read_record_batch(table.slice(a, b - a).to_batches()[0].serialize(),
                                             schema.EVENTS)  # fmt: skip
            out.write_batch(batch, custom_metadata={"crc32": schema.batch_checksum(batch)})
    meta_path = run / f"rank-{rank:05d}.meta.json"
    meta = json.loads(meta_path.read_text())
    meta["events_written"] = table.num_rows
    meta.pop(schema.CHECKSUM_KEY, None)
    meta_path.write_text(json.dumps(meta))


def _same_both_ways(run: Path) -> RunMetrics:
    trace = load_trace(run)
    expected = compute_metrics(trace)
    for window_events in (1, 1_000_000):
        got, sample = stream_metrics(run, window_events=window_events)
        assert same_metrics(expected, got) == [], window_events
        assert got.warnings == expected.warnings
        assert sample.events.equals(sample_iterations(trace, expected).events)
    return expected


def test_calls_after_the_last_iteration_are_kept_apart(tmp_path: Path) -> None:
    """A checkpoint's broadcasts after every rank's last iteration: trailing, not in
    the last iteration's numbers, in both paths."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "straggler", run)
    for rank in range(8):

        def add(ev: pl.DataFrame) -> pl.DataFrame:
            last = ev.tail(1)
            extra = pl.concat(
                [
                    last.with_columns(
                        step=pl.col("step") + 1,
                        seq=pl.col("seq") + k,
                        op=pl.lit("broadcast"),
                        enter_ns=pl.col("exit_ns") + 1_000_000 * k,
                        exit_ns=pl.col("exit_ns") + 1_000_000 * k + 500_000,
                    )
                    for k in (1, 2)
                ]
            )
            return pl.concat([ev, extra])

        _rewrite(run, rank, add)
    expected = _same_both_ways(run)
    assert expected.trailing["calls"] == 16
    assert expected.trailing["ops"] == {"broadcast": 16}


def test_a_call_across_an_iteration_boundary(tmp_path: Path) -> None:
    """One rank makes the last call of step 0 (the warm-up) in step 1, and the last call
    of step 10 in step 11: the first is left out whole, the second is one instance of
    step 10 — windows of one step each split it, so that run is read whole."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "straggler", run)
    moved = pl.col("seq").is_in([3, 43])
    _rewrite(run, 3, lambda ev: ev.with_columns(step=pl.when(moved).then(pl.col("step") + 1)
                                                 .otherwise(pl.col("step"))))  # fmt: skip
    expected = _same_both_ways(run)
    inst = expected.instances
    assert inst.filter(pl.col("seq") == 3).height == 0  # the warm-up call, left out
    assert inst.filter(pl.col("seq") == 43)["n"].to_list() == [8]  # one instance, all ranks


def test_steps_out_of_order_are_read_in_two_passes(tmp_path: Path) -> None:
    """A rank's later steps written before its earlier ones: the one pass meets a step
    it passed and the run is read from the index instead, with the same numbers."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "straggler", run)
    _rewrite(run, 2, lambda ev: pl.concat([ev.slice(40), ev.slice(0, 40)]), cuts=(80,))
    index = read_metadata(run)
    with pytest.raises(OutOfOrder):
        for _ in Sweep(index, columns=ANALYSIS_COLUMNS, warmup_steps=1, window_events=1):
            pass
    _same_both_ways(run)


def test_a_rotated_run_agrees_with_the_loader(tmp_path: Path) -> None:
    """Always-on mode: segments named by the writer, the oldest rotated out. The steps
    some rank lost are left out of every rank, as load_trace leaves them."""
    policy = RotationPolicy(segment_s=1e-9, keep_s=0, budget_bytes=150_000)
    meta = {"world_size": 2, "host": "h"}
    writers = [
        RankTraceWriter(tmp_path, r, meta, flush_interval_s=3600, rotation=policy, summaries=True)
        for r in range(2)
    ]
    for step in range(600):
        for r, w in enumerate(writers):
            for slot in range(4):
                enter = 1_000_000_000 + step * 10_000_000 + slot * 100_000 + r * 20_000
                row = (r, step, "0", 2, step * 4 + slot, "all_reduce", 4096, "float32", -1)
                w.add_event((*row, enter, enter + 50_000, "wait", "completed", None, enter))
            start = 1_000_000_000 + step * 10_000_000
            w.add_step((r, step, start, start + 9_999_999, 0))
        if step % 5 == 4:
            for w in writers:
                w.flush()
    for w in writers:
        w.close()
    index = read_metadata(tmp_path)
    files, _ = rank_files(index, 0)
    assert len(files) > 1 and files[1].name.startswith("rank-00000.events.0")
    assert needs_whole_run(index)
    trace = load_trace(tmp_path)
    assert trace.events["step"].min() > 0  # the oldest steps were rotated out
    expected = compute_metrics(trace)
    got, _ = stream_metrics(tmp_path, window_events=1)
    assert same_metrics(expected, got) == []
    assert any("rotated out" in w for w in got.warnings)


def _cut_in_batches(run: Path) -> None:
    """Every rank's events rewritten a batch per step (they are in step order)."""
    for path in sorted(run.glob("rank-*.events.arrow")):
        rank = int(path.name.split(".")[0].split("-")[1])
        step = pa.ipc.open_stream(pa.py_buffer(path.read_bytes())).read_all()["step"]
        step = step.to_numpy()
        assert (np.diff(step) >= 0).all()
        _rewrite(run, rank, lambda ev: ev, cuts=tuple(np.flatnonzero(np.diff(step)) + 1))


@pytest.mark.parametrize("indexed_by", ["sweep", "scan"])
def test_a_step_is_read_again_from_its_batches_bytes_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indexed_by: str
) -> None:
    """Reading one step of every rank again (the report's samples) reads the bytes of
    the batches holding it and nothing else, with the kernel's read-ahead off for the
    file (thousands of ranks' read-ahead would read most of a large run), and gives the
    rows the loader has for that step."""
    import os

    from syncpace.trace.read.index import scan_rank
    from syncpace.trace.read.window import read_window

    run = tmp_path / "run"
    shutil.copytree(DATA / "latency_bound", run)
    _cut_in_batches(run)
    index = read_metadata(run)
    if indexed_by == "sweep":
        sweep = Sweep(index, columns=ANALYSIS_COLUMNS, warmup_steps=1, window_events=1)
        for _ in sweep:
            pass
        scans = sweep.scans()
    else:
        scans = [scan_rank(index, rank) for rank in index.ranks]
    step = 5
    read: list[int] = []
    advised: list[int] = []
    real_pread, real_advise = os.pread, os.posix_fadvise

    def pread(fd: int, n: int, at: int) -> bytes:
        read.append(n)
        return real_pread(fd, n, at)

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append(advice)
        real_advise(fd, offset, length, advice)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "posix_fadvise", advise)
    got = read_window(scans, step, step + 1, columns=schema.EVENTS.names)
    monkeypatch.undo()
    sizes = sum(p.stat().st_size for p in run.glob("rank-*.events.arrow"))
    # the step's batch of each rank, read in one call
    assert len(read) == len(index.ranks)
    assert sum(read) < sizes / 8
    assert advised.count(os.POSIX_FADV_RANDOM) == len(index.ranks)
    loaded = load_trace(run).events.filter(pl.col("step") == step)
    assert pl.from_arrow(got).equals(loaded.select(schema.EVENTS.names))


def test_steps_read_again_together_decode_a_shared_batch_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's sampled steps read together: each rank's file opened once, a batch
    holding two of them read once, the rows rank by rank, the steps in the order asked
    (what a reading of each rank and step alone gives)."""
    import os

    from syncpace.trace.read.window import read_steps

    run = tmp_path / "run"
    shutil.copytree(DATA / "latency_bound", run)
    for path in sorted(run.glob("rank-*.events.arrow")):  # a batch of two steps each
        rank = int(path.name.split(".")[0].split("-")[1])
        step = pa.ipc.open_stream(pa.py_buffer(path.read_bytes())).read_all()["step"]
        step = step.to_numpy()
        cuts = np.flatnonzero((np.diff(step) > 0) & (step[1:] % 2 == 0)) + 1
        _rewrite(run, rank, lambda ev: ev, cuts=tuple(cuts))
    index = read_metadata(run)
    sweep = Sweep(index, columns=ANALYSIS_COLUMNS, warmup_steps=1, window_events=1)
    for _ in sweep:
        pass
    scans = sweep.scans()
    read: list[int] = []
    opened: list[int] = []
    real_pread, real_advise = os.pread, os.posix_fadvise

    def pread(fd: int, n: int, at: int) -> bytes:
        read.append(n)
        return real_pread(fd, n, at)

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        opened.append(advice)
        real_advise(fd, offset, length, advice)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "posix_fadvise", advise)
    got = read_steps(scans, [5, 4, 9], columns=schema.EVENTS.names)
    monkeypatch.undo()
    ranks = len(index.ranks)
    assert len(read) == 2 * ranks  # steps 4 and 5 share a batch; 9 is in another
    assert opened.count(os.POSIX_FADV_RANDOM) == ranks
    events = load_trace(run).events.select(schema.EVENTS.names)
    expected = pl.concat(
        [
            events.filter((pl.col("rank") == r) & (pl.col("step") == s))
            for r in index.ranks
            for s in (5, 4, 9)
        ]
    )
    assert expected.height > 0 and pl.from_arrow(got).equals(expected)


def test_a_file_cut_after_it_was_read_is_said_in_one_line(tmp_path: Path) -> None:
    """A rank's file cut short between the read and reading a step again: an error
    naming the file, not a traceback nor rows of another batch."""
    from syncpace.trace.read.window import read_window

    run = tmp_path / "run"
    shutil.copytree(DATA / "latency_bound", run)
    _cut_in_batches(run)
    sweep = Sweep(read_metadata(run), columns=ANALYSIS_COLUMNS, warmup_steps=1, window_events=1)
    for _ in sweep:
        pass
    scans = sweep.scans()
    path = run / "rank-00003.events.arrow"
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)
    with pytest.raises(TraceError) as err:
        read_window(scans, 10, 11, columns=ANALYSIS_COLUMNS)
    assert str(path) in str(err.value)
    assert "changed since it was read" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_file_replaced_by_a_fifo_after_it_was_read_is_refused_at_once(tmp_path: Path) -> None:
    """Reading a step again opens the file as the sweep did: a FIFO put in its place
    (whose open would wait for a writer) is refused in one line, without waiting."""
    import os
    import signal

    from syncpace.trace.read.window import read_window

    run = tmp_path / "run"
    shutil.copytree(DATA / "latency_bound", run)
    sweep = Sweep(read_metadata(run), columns=ANALYSIS_COLUMNS, warmup_steps=1, window_events=1)
    for _ in sweep:
        pass
    scans = sweep.scans()
    path = run / "rank-00002.events.arrow"
    path.unlink()
    os.mkfifo(path)

    def hang(*_: object) -> None:
        raise AssertionError("reading the step again waited on the FIFO")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(10)
    try:
        with pytest.raises(TraceError) as err:
            read_window(scans, 5, 6, columns=ANALYSIS_COLUMNS)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert str(err.value) == f"{path}: is a FIFO, not a regular file (refused, not read)"
