"""The streaming analysis against the in-memory one: the same numbers, exactly, on
every saved fixture, with windows of one step (every boundary crossed) and of the
default size; and the same errors, warnings and accounts on damaged files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from syncpace.analysis.metrics import compute_metrics
from syncpace.analysis.streaming import same_metrics, stream_metrics
from syncpace.analysis.timeline import sample_iterations
from syncpace.errors import TraceError
from syncpace.trace.reader import load_trace

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
