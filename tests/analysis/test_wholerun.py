"""The whole run of an always-on job: per-step summaries binned, detections paired, the
full-detail steps named; damaged summaries and hostile detection lines met as the
reader meets bad input. The truth is what the test wrote through the real writer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from always_on_run import (
    GOOD,
    PER_STEP,
    STEPS,
    WAIT_NS,
    WORLD,
    step_ns,
    write_detections,
    write_run,
)
from syncpace.analysis import analyze
from syncpace.analysis.wholerun import MAX_POINTS, _Bins, intervals, whole_run
from syncpace.cli.main import main
from syncpace.trace import RankTraceWriter, load_trace, schema
from syncpace.trace.wholerun import RankSeries


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("always-on")
    write_run(root)
    write_detections(root, {r: GOOD for r in range(WORLD)})
    return root


def test_every_step_is_summarised_and_the_full_detail_steps_are_the_readers(run):
    trace = load_trace(run)
    w = whole_run(trace)
    assert w is not None
    assert (w.steps, w.summarised, w.first_step, w.last_step, w.ranks) == (STEPS, STEPS, 0, 299, 3)
    kept = sorted(set(trace.steps["step"].to_list()) | set(trace.events["step"].to_list()))
    assert kept and kept[0] > 0  # rotation removed the oldest steps
    assert list(w.full_detail) == intervals(np.array(kept))
    assert w.full_detail_steps == len(kept)
    assert w.calls == WORLD * STEPS * PER_STEP and w.failed == 0


def test_one_bin_a_step_holds_each_ranks_own_times(run):
    w = whole_run(load_trace(run))
    assert w is not None and w.bin_steps == 1 and w.bins.height == STEPS
    b = w.bins
    times = np.array([[step_ns(r, s) for s in range(STEPS)] for r in range(WORLD)])
    assert b["step_ns_min"].to_list() == times.min(axis=0).tolist()
    assert b["step_ns_max"].to_list() == times.max(axis=0).tolist()
    assert b["step_ns_median"].to_list() == np.median(times, axis=0).tolist()
    assert b["step_ns_worst"].to_list() == times.max(axis=0).tolist()
    # blocked: from the wait's start to the call's end, every call of the step
    assert set(b["blocked_ns_median"].to_list()) == {PER_STEP * WAIT_NS}


def test_bins_double_to_stay_within_the_points_and_keep_exact_means(run):
    trace = load_trace(run)
    w = whole_run(trace, max_points=64)
    assert w is not None
    assert w.bin_steps == 8 and w.bins.height == 38  # 300 steps: 8 a bin is the first <= 64
    times = np.array([[step_ns(r, s) for s in range(STEPS)] for r in range(WORLD)], float)
    for row in w.bins.iter_rows(named=True):
        means = times[:, row["first_step"] : row["last_step"] + 1].mean(axis=1)
        assert row["step_ns_max"] == pytest.approx(means.max())
        assert row["step_ns_min"] == pytest.approx(means.min())
        assert row["step_ns_median"] == pytest.approx(np.median(means))
    assert w.bins["steps"].sum() == STEPS


def test_a_million_steps_of_many_ranks_fit_in_the_points():
    ranks, steps = 16, 1_000_000
    bins = _Bins(ranks, MAX_POINTS)
    spike = (3, 777_777, 9_000_000_000)  # rank, step, ns: one very slow step
    for r in range(ranks):
        ids = np.arange(steps, dtype=np.int64)
        ns = np.full(steps, 100_000_000 + r, dtype=np.int64)
        if r == spike[0]:
            ns[spike[1]] = spike[2]
        bins.add(r, RankSeries(r, ids, ns, ids, ids * 0 + 2, ids * 0, ids * 0 + 7, ids * 0))
    assert bins.width == 2048 and bins.cols <= MAX_POINTS < 2 * bins.cols
    assert (bins.step_n.sum(axis=1) == steps).all()
    assert int(bins.worst.max()) == spike[2] and int(bins.worst.argmax()) == spike[1] // 2048
    assert int(bins.calls.sum()) == 2 * ranks * steps


def test_detections_become_intervals_with_who_and_when(run):
    w = whole_run(load_trace(run))
    assert w is not None and w.warnings == ()
    spans = [(d.kind, d.rank, d.start_step, d.detected_step, d.stop_step) for d in w.detections]
    assert spans == [
        ("straggler", 1, 101, 112, 163),
        ("step_time_jump", None, 119, 119, 169),
        ("straggler", 2, 271, 280, None),
    ]


def test_the_terminal_and_json_say_it(run, capsys):
    assert main(["diagnose", str(run)]) == 0
    out = capsys.readouterr().out
    kept = whole_run(load_trace(run)).full_detail  # type: ignore[union-attr]
    spans = ", ".join(f"{a}–{b}" for a, b in kept)
    assert f"whole run: {STEPS} steps summarised (steps 0–299, 3 ranks)" in out
    assert f"with full detail ({spans}); detections: straggler: rank 1 (n1, local rank" in out
    assert "from step 101 (detected at 112), over at step 163" in out
    assert main(["diagnose", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    whole = data["metrics"]["runs"][0]["whole_run"]
    assert whole["summarised"] == STEPS and len(whole["detections"]) == 3


def test_a_run_without_summaries_has_no_whole_run(tmp_path, capsys):
    w = RankTraceWriter(tmp_path, 0, {"world_size": 1, "host": "h"})
    w.add_step((0, 0, 1, 2, 0))
    w.close()
    assert analyze(tmp_path).runs[0].whole_run is None
    assert main(["diagnose", str(tmp_path)]) == 0
    assert "whole run:" not in capsys.readouterr().out


# Bad input -------------------------------------------------------------------------------
HOSTILE = [
    "not json at all",
    '{"kind": "straggler", "state": "start", "step": -5, "rank": 1}',
    '{"kind": "straggler", "state": "start", "step": 5, "rank": 99}',
    '{"kind": "\\u001b[31mevil\\u0007", "state": "start", "step": 5}',
    '{"kind": "straggler", "state": "start", "step": 5, "rank": 1, "cost": NaN}',
    '{"kind": "straggler", "state": "start", "step": 5}',
    '{"kind": "straggler", "state": "stop", "step": 5, "rank": 0, "since_step": 9}',
    "[" * 5000,
    '{"kind": "straggler", "state": "start", "step": 18446744073709551616, "rank": 1}',
]


@pytest.fixture
def copy(run, tmp_path) -> Path:
    root = tmp_path / "copy"
    root.mkdir()
    for p in run.iterdir():
        (root / p.name).write_bytes(p.read_bytes())
    return root


def test_hostile_detection_lines_are_left_out_with_one_warning_naming_the_file(copy, capsys):
    write_detections(copy, {0: [*HOSTILE, *GOOD, "\x00\xff\xfe"]})
    w = whole_run(load_trace(copy))
    assert w is not None and len(w.detections) == 3  # the good lines of every rank
    path = copy / f"{schema.rank_stem(0)}{schema.MONITOR_SUFFIX}"
    assert len(w.warnings) == 1
    warning = w.warnings[0]
    assert warning.startswith(f"{path}: {len(HOSTILE) + 1} line(s) are not detections")
    assert "line 1: JSON is malformed" in warning
    assert all(c.isprintable() for c in warning)
    assert main(["diagnose", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "rank-00000.monitor.jsonl" in out and "\x1b" not in out and "\x07" not in out


def test_each_bad_detection_line_is_named_for_what_it_is(copy):
    reasons = []
    for line in HOSTILE:
        write_detections(copy, {r: [line] for r in range(WORLD)})
        w = whole_run(load_trace(copy))
        assert w is not None and w.detections == ()
        reasons.append(w.warnings[0].split("(line 1: ", 1)[1])
    assert "outside the world of 3" in reasons[2]
    assert "a straggler without a rank" in reasons[5]
    assert "since step 9 after its step 5" in reasons[6]
    assert reasons[7].startswith("longer than 4,096 bytes")
    assert "\x1b" not in reasons[3] and "\\x1b" in reasons[3]


def test_a_detections_file_that_is_not_a_regular_file_is_refused(copy):
    path = copy / f"{schema.rank_stem(1)}{schema.MONITOR_SUFFIX}"
    path.unlink()
    os.mkfifo(path)
    w = whole_run(load_trace(copy))  # never blocks on the FIFO
    assert w is not None and len(w.detections) == 3  # the other ranks' copies
    assert w.warnings == (f"{path}: is a FIFO, not a regular file (refused, not read); "
                          "its detections are left out",)  # fmt: skip


def test_a_truncated_summary_file_keeps_its_complete_batches_and_says_so(copy, capsys):
    path = copy / f"{schema.rank_stem(1)}{schema.SUMMARY_SUFFIX}"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    trace = load_trace(copy)
    assert any(w.startswith(f"{path}: cut short after") for w in trace.warnings)
    w = whole_run(trace)
    assert w is not None and w.summarised == STEPS  # the other ranks hold every step
    held = trace.summaries.filter(trace.summaries["rank"] == 1).height
    assert 0 < held < STEPS
    assert w.calls == (2 * STEPS + held) * PER_STEP
    assert main(["diagnose", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "rank-00001.summary.arrow: cut short" in out and "whole run:" in out


def test_invalid_summary_rows_are_left_out_and_counted(copy):
    path = copy / f"{schema.rank_stem(2)}{schema.SUMMARY_SUFFIX}"
    table = pa.ipc.open_stream(path.read_bytes()).read_all()
    calls = table.column("calls").to_pylist()
    calls[5] = -3
    table = table.set_column(table.column_names.index("calls"), "calls",
                             pa.array(calls, pa.int32()))  # fmt: skip
    with pa.ipc.new_stream(str(path), schema.SUMMARY) as out:
        out.write_table(table)
    trace = load_trace(copy)
    assert f"{path}: 1 of {STEPS:,} summaries left out as invalid (1 negative count)" in (
        trace.warnings
    )
    assert trace.summaries.height == WORLD * STEPS - 1


def test_an_unreadable_summary_file_is_a_warning_not_an_error(copy, capsys):
    path = copy / f"{schema.rank_stem(0)}{schema.SUMMARY_SUFFIX}"
    path.write_bytes(b"\x00garbage, not arrow")
    trace = load_trace(copy)
    assert any(w.startswith(f"{path}: not an Arrow IPC stream") and
               w.endswith("its summaries are left out") for w in trace.warnings)  # fmt: skip
    w = whole_run(trace)
    assert w is not None and w.ranks == 2
    assert main(["report", str(copy), "-o", str(copy / "r.html")]) == 0


def _monitor(root: Path, rank: int) -> Path:
    return root / f"{schema.rank_stem(rank)}{schema.MONITOR_SUFFIX}"


def test_a_flipped_digit_in_a_detection_fails_its_checksum_and_every_verb_says_so(copy, capsys):
    path = _monitor(copy, 0)
    lines = path.read_text().splitlines()
    assert '"cost": 0.25' in lines[0]
    lines[0] = lines[0].replace('"cost": 0.25', '"cost": 0.29')  # still valid JSON
    path.write_text("".join(line + "\n" for line in lines))
    trace = load_trace(copy)
    expected = (
        f"{path}: 1 line(s) are not detections, left out (line 1: its checksum does not match)"
    )
    assert expected in trace.warnings
    w = whole_run(trace)
    assert w is not None and w.warnings == (expected,)
    # the other ranks' copies of the same detection stand: nothing else is lost
    assert [d.cost for d in w.detections if d.kind == "straggler"][0] == 0.25
    for verb in ("trace-info", "diagnose"):
        assert main([verb, str(copy)]) == 0
        assert "its checksum does not match" in capsys.readouterr().out


def test_a_detection_line_without_a_checksum_is_read_unchecked(copy):
    record = {"kind": "straggler", "state": "start", "step": 7, "rank": 2, "share": 0.5}
    write_detections(copy, {r: [json.dumps(record)] for r in range(WORLD)})
    w = whole_run(load_trace(copy))
    assert w is not None and w.warnings == ()
    assert [(d.kind, d.rank, d.start_step) for d in w.detections] == [("straggler", 2, 7)]


def test_the_monitors_line_checks_and_a_change_anywhere_in_it_fails():
    from syncpace.trace.wholerun import _checksum_fails, detection_line

    line = detection_line({"kind": "straggler", "state": "stop", "step": 12, "rank": 1})
    assert line.endswith('"}') and json.loads(line)["step"] == 12
    raw = line.encode()
    assert not _checksum_fails(raw)
    body = raw.index(b', "crc32"')
    for at in range(body):  # every byte of the record itself
        changed = raw[:at] + bytes([raw[at] ^ 0x01]) + raw[at + 1 :]
        assert _checksum_fails(changed), changed
    with pytest.raises(ValueError):
        detection_line({"kind": "straggler", "share": float("nan")})


def test_a_finished_ranks_missing_or_short_summary_file_is_said(copy, capsys):
    gone = copy / f"{schema.rank_stem(0)}{schema.SUMMARY_SUFFIX}"
    gone.unlink()
    short = copy / f"{schema.rank_stem(2)}{schema.SUMMARY_SUFFIX}"
    table = pa.ipc.open_stream(short.read_bytes()).read_all()
    with pa.ipc.new_stream(str(short), schema.SUMMARY) as out:  # a clean end: only the
        out.write_table(table.slice(0, 100))  # declared count tells
    trace = load_trace(copy)
    assert (f"{gone}: missing (the metadata declares {STEPS:,} summaries); the whole run "
            "leaves rank 0 out") in trace.warnings  # fmt: skip
    assert (f"{short}: 100 summaries found, fewer than the {STEPS:,} the metadata "
            "declares") in trace.warnings  # fmt: skip
    assert main(["trace-info", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "rank-00000.summary.arrow: missing" in out and "rank-00002.summary.arrow: 100" in out


def test_a_ranks_missing_or_cut_detections_file_is_said_against_its_declared_count(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    write_run(root, detections={0: len(GOOD), 1: len(GOOD), 2: 2})
    write_detections(root, {0: GOOD, 2: GOOD[:1]})  # rank 1's file gone, rank 2's cut
    trace = load_trace(root)
    gone, cut = _monitor(root, 1), _monitor(root, 2)
    assert (f"{gone}: missing (the metadata declares {len(GOOD)} detections); they are left "
            "out where no other rank holds them") in trace.warnings  # fmt: skip
    assert (f"{cut}: 1 detection line(s) found, fewer than the 2 the metadata "
            "declares") in trace.warnings  # fmt: skip
    w = whole_run(trace)
    assert w is not None and len(w.detections) == 3  # rank 0 holds them all


@pytest.mark.parametrize("verb", ["diagnose", "report"])
def test_each_detections_file_is_read_once(run, verb, monkeypatch, tmp_path, capsys):
    """At thousands of ranks each holding the same lines, a second reading doubles the
    cost: the reader's detections are the whole run's."""
    from syncpace.trace import wholerun

    read: list[Path] = []
    real = wholerun.read_detections

    def counted(path, *args, **kwargs):
        read.append(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(wholerun, "read_detections", counted)
    argv = [verb, str(run)] + (["-o", str(tmp_path / "r.html")] if verb == "report" else [])
    assert main(argv) == 0
    capsys.readouterr()
    files = sorted(run.glob(f"*{schema.MONITOR_SUFFIX}"))
    assert len(files) == WORLD
    assert sorted(read) == files
