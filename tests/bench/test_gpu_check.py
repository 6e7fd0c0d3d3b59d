"""The GPU check (benchmarks/gpu_check.py) where there is no GPU: its one line, and the
rules it concludes by, on synthetic profiles, traces and runs."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SRC = BENCH.parent / "src"
MS = 1_000_000


@pytest.fixture(scope="module")
def fig():
    sys.path.insert(0, str(BENCH))
    try:
        import _gpu_check_figures

        yield _gpu_check_figures
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the check runs for minutes")
def test_without_cuda_it_prints_one_line_and_exits_0(tmp_path):
    out = tmp_path / "gpu-check.json"
    env = dict(os.environ, PYTHONPATH=str(SRC))
    proc = subprocess.run(
        [sys.executable, str(BENCH / "gpu_check.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and "no CUDA" in lines[0]
    assert not out.exists()  # no figures: nothing is written


# (a) Matching the profiler's device work to the traced calls ----------------------------------
def _mark(ts):
    return {"ph": "X", "cat": "user_annotation", "name": "gpu_check:call", "ts": ts, "dur": 50}


def _launch(ts, correlation):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 5,
            "args": {"correlation": correlation}}  # fmt: skip


def _work(ts, dur, correlation=None, cat="kernel"):
    args = {} if correlation is None else {"correlation": correlation}
    return {"ph": "X", "cat": cat, "name": "k", "ts": ts, "dur": dur, "args": args}


def test_device_work_goes_to_the_call_that_launched_it(fig):
    events = [
        _mark(1000.0),
        _mark(2000.0),
        _mark(3000.0),
        {"ph": "X", "cat": "gpu_user_annotation", "name": "gpu_check:call", "ts": 1500, "dur": 1},
        _launch(1010.0, 7),
        _work(1100.0, 400.0, 7),
        # launched in call 1, run (as the device clock reads it) past mark 2's start
        _launch(1900.0, 8),
        _work(2001.0, 10.0, 8),
        # a copy with no launch in the profile: its own start places it, and copies
        # that overlap count once in the busy time
        _work(2100.0, 100.0, None, "gpu_memcpy"),
        _work(2150.0, 100.0, None, "gpu_memcpy"),
        _work(500.0, 10.0),  # before the first mark: not a measured call
        {"ph": "M", "name": "thread_name"},
    ]
    first, second, third = fig.call_windows(events, "gpu_check:call")
    assert (first.start_us, first.end_us, first.activities) == (1100.0, 2011.0, 2)
    assert first.busy_us == pytest.approx(410.0)
    assert (second.start_us, second.extent_us, second.busy_us) == (2100.0, 150.0, 150.0)
    assert third is None  # the profiler saw no device work for it


def test_traced_spans_against_the_profiler(fig):
    window = fig.Window
    windows = [window(0, 1000, 1000, 1), window(0, 1000, 1000, 1), None, window(0, 2000, 1, 1)]
    spans = [1_010_000, 1_030_000, 900_000, -1]  # ns; the last call has no device times
    result = fig.compare_spans(spans, windows)
    assert result["matched"] == 2 and result["calls_with_device_times"] == 3
    assert result["calls_with_device_work"] == 3
    assert result["median_ratio"] == pytest.approx(1.02)
    assert result["p90_ratio"] == pytest.approx(1.028)
    assert result["median_excess_us"] == pytest.approx(20.0)
    assert result["within_5pct"]
    late = fig.compare_spans([1_200_000, 1_010_000], windows[:2])
    assert not late["within_5pct"] and late["p90_ratio"] == pytest.approx(1.181)


def test_nothing_matched_is_not_within_tolerance(fig):
    result = fig.compare_spans([-1, -1], [None, None])
    assert result["matched"] == 0 and not result["within_5pct"]
    assert result["median_ratio"] is None and json.dumps(result)


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_percentiles_read_as_numpys(fig, q):
    values = [3.0, 1.0, 7.0, 2.5, 9.0, 4.0]
    assert fig.percentile(values, q) == pytest.approx(np.percentile(values, q * 100))


# (b) Run-ahead and the last to arrive ------------------------------------------------------------
def _row(rank, seq, enter, device_enter):
    return {
        "rank": rank,
        "group": "0",
        "seq": seq,
        "enter_ns": enter,
        "device_enter_ns": device_enter,
    }


def test_the_gpu_bound_rank_runs_ahead_and_arrives_last_on_the_device(fig):
    rows = []
    for seq in range(5):
        t0 = seq * 100 * MS
        rows.append(_row(0, seq, t0 + 15 * MS, t0 + 15 * MS + 20_000))  # slept, device idle
        rows.append(_row(1, seq, t0 + MS // 10, t0 + 40 * MS))  # issued at once, device busy
    rows.append(_row(1, 99, 5, -1))  # no device times: left out
    ahead = fig.run_ahead_ms(rows)
    assert ahead[0] == pytest.approx(0.02) and ahead[1] == pytest.approx(39.9)
    by_host = fig.last_arrivals(rows, "enter_ns")
    by_device = fig.last_arrivals(rows, "device_enter_ns")
    assert by_host == {0: 5} and by_device == {1: 5}
    assert fig.mostly(by_host) == 0 and fig.mostly(by_device) == 1 and fig.mostly({}) is None
    assert fig.run_ahead_ms([_row(0, 0, 5, -1)]) == {0: None}


def test_findings_are_read_without_assuming_their_fields(fig):
    findings = [
        {"mode": "straggler", "ranks": [1], "summary": "rank 1 computes more"},
        {"kind": "late_cpu", "summary": "x" * 500},
        "a bare string",
    ]
    lines = fig.finding_lines(findings)
    assert lines[0] == "straggler ranks [1]: rank 1 computes more"
    assert lines[1].startswith("late_cpu: x") and len(lines[1]) < 200
    assert lines[2] == "a bare string"
    assert fig.finding_lines(None) == [] and fig.finding_lines({"findings": 1}) == []


# (c) Pacing on the device ------------------------------------------------------------------------
def _pacing(delays, on_device=True, host_sleeps=False):
    """A rank whose device runs 2 ms of work between calls, plus each step's delay."""
    calls, steps, t = [], [], 0
    for step in range(12):
        delay = delays.get(step, 0)
        t += 2 * MS + delay  # the device's gap before this step's call
        calls.append({"step": step, "device_enter_ns": t, "device_exit_ns": t + MS // 2})
        t += MS // 2
        host = 300_000 + (delay if host_sleeps else 0)
        steps.append({
            "step": step, "start_ns": step * 10 * MS, "end_ns": step * 10 * MS + host,
            "pacing_delay_ns": delay, "device_delay_ns": delay if on_device else 0,
        })  # fmt: skip
    return calls, steps


def test_a_delay_on_the_device_shifts_the_arrival_and_the_host_does_not_sleep(fig):
    calls, steps = _pacing({6: 20 * MS, 9: 20 * MS})
    figures = fig.pacing_figures(calls, steps, first_measured=3)
    assert figures["shift_ms"] == pytest.approx(20.0) and figures["delay_ms"] == 20.0
    assert figures["plain_gap_ms"] == pytest.approx(2.0)
    assert [r["step"] for r in figures["delayed_steps"]] == [6, 9]
    assert figures["on_device"] == 2 and figures["host_slept"] == 0
    assert all(fig.pacing_checks(figures).values())
    assert json.dumps(figures)


def test_a_delay_slept_on_the_host_fails_the_pacing_checks(fig):
    calls, steps = _pacing({6: 20 * MS}, on_device=False, host_sleeps=True)
    checks = fig.pacing_checks(fig.pacing_figures(calls, steps, first_measured=3))
    assert checks == {
        "placed_on_device": False,
        "host_did_not_sleep": False,
        "arrival_shifted_by_delay": True,
    }


def test_an_arrival_that_did_not_move_fails(fig):
    calls, steps = _pacing({})
    steps[6]["pacing_delay_ns"] = steps[6]["device_delay_ns"] = 20 * MS
    checks = fig.pacing_checks(fig.pacing_figures(calls, steps, first_measured=3))
    assert checks["placed_on_device"] and not checks["arrival_shifted_by_delay"]
    none = fig.pacing_checks(fig.pacing_figures(calls[:2], steps[:0], first_measured=3))
    assert not any(none.values())  # nothing delayed: nothing shown


# (d) Flight Recorder counts and losses -------------------------------------------------------
def test_flight_recorder_names_read_as_the_traces_ops(fig):
    names = ["nccl:all_reduce", "nccl:_allgather_base", "gloo:broadcast", "nccl:all_reduce"]
    assert fig.count_ops(fig.fr_op(n) for n in names) == {
        "all_gather": 1,
        "all_reduce": 2,
        "broadcast": 1,
    }


def test_workload_counts_and_losses(fig):
    losses = [(0.5).hex(), (0.25).hex()]
    counts = {"all_reduce": 12, "broadcast": 4}
    run = {"losses": losses, "fr": {"source": "_dump_nccl_trace_json", "counts": counts}}
    same = fig.compare_workload(run, dict(run), dict(counts))
    assert all(same["checks"].values()) and same["note"] is None
    assert same["losses_traced"] == [0.5, 0.25] and same["collectives"] == 16
    fewer = fig.compare_workload(run, run, {"all_reduce": 11, "broadcast": 4})
    assert not fewer["checks"]["counts_equal"] and fewer["checks"]["fr_unchanged_by_tracing"]
    drifted = fig.compare_workload(run, dict(run, losses=[(0.5).hex(), (0.2500001).hex()]), counts)
    assert not drifted["checks"]["losses_identical"]
    broken = fig.compare_workload({"losses": losses, "fr": {"error": "no dump"}}, run, counts)
    assert not broken["checks"]["counts_equal"] and broken["fr_error"] == "no dump"


def test_a_job_with_no_collective_says_so(fig):
    run = {"losses": [(1.0).hex()], "fr": {"source": "x", "counts": {}}}
    result = fig.compare_workload(run, run, {})
    assert all(result["checks"].values()) and "0 with 0" in result["note"]


# (e) Overhead ------------------------------------------------------------------------------------
def test_overhead_ratio_and_cpu_per_collective(fig):
    runs = []
    for pair in range(3):
        runs.append({"traced": False, "step_s": [0.010, 0.0101, 0.0099], "cpu_s": [0.004] * 3})
        slow = 1.0 + 0.002 * (pair + 1)
        runs.append({"traced": True, "step_s": [0.010 * slow] * 3, "cpu_s": [0.004, 0.0046, 0.004]})
    figures = fig.overhead_figures(runs, collectives_per_step=64)
    assert figures["ratio"] == pytest.approx(1 / 1.004, abs=1e-4)
    assert figures["pair_ratios"] == pytest.approx([1 / 1.002, 1 / 1.004, 1 / 1.006], abs=1e-4)
    # mean CPU per step: 0.2 ms more traced, over 64 calls
    assert figures["cpu_us_per_collective"] == pytest.approx(200 / 64, abs=0.01)
    assert figures["step_ms_untraced"] == pytest.approx(10.0)
    assert fig.overhead_figures(runs[:1], 64)["ratio"] is None  # no traced run: no ratio


def test_collectives_per_step_from_the_steps_of_calls(fig):
    steps = [0] * 3 + [1] * 60 + [2] * 62 + [3] * 64
    assert fig.per_step_counts(steps, first=1) == 62.0
    assert fig.per_step_counts([0, 0], first=1) == 0.0


# The machine and the report ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "text"),
    [
        ((2, 21, 5), "2.21.5"),
        ((2, 27, 3, "+cuda12.8"), "2.27.3-+cuda12.8"),
        (2708, "2.7.8"),
        (22105, "2.21.5"),
        (None, None),
        ("2.20.5", "2.20.5"),
    ],
)
def test_nccl_versions_as_torch_has_given_them(fig, version, text):
    assert fig.nccl_version_text(version) == text


def test_the_report_says_which_parts_held(fig):
    parts = {
        "a": {"title": "A", "status": "ok", "checks": {"x": True}, "summary": ["fine"]},
        "b": {"title": "B", "status": "ok", "checks": {"x": True, "y": False}},
        "c": {"title": "C", "status": "timeout", "error": "killed after 60 s"},
        "d": {"title": "D", "status": "failed", "error": "Traceback\nValueError: bad"},
        "e": {"title": "E", "status": "ok", "checks": {}},
    }
    env = {"gpu": "NVIDIA H100", "driver": "550.54", "cuda": "12.4", "nccl": "2.21.5"}
    report = fig.assemble(dict(env, torch="2.5.1"), parts, 123.456)
    assert report["held"] == {"a": True, "b": False, "c": False, "d": False, "e": False}
    assert not report["all_held"] and report["elapsed_s"] == 123.5
    json.dumps(report)
    text = "\n".join(fig.summary_lines(report))
    assert "NVIDIA H100 | driver 550.54 | CUDA 12.4 | NCCL 2.21.5 | torch 2.5.1" in text
    assert "(a) A: held" in text and "    fine" in text
    assert "(b) B: checks failed" in text and "failed checks: y" in text
    assert "(c) C: timeout" in text and "error: ValueError: bad" in text
    assert text.endswith("not every part held")
    only = fig.assemble({}, {"a": parts["a"]}, 1.0)
    assert only["all_held"] and fig.summary_lines(only)[-1] == "all parts held"


# The worker's Flight Recorder reading ------------------------------------------------------------
@pytest.fixture(scope="module")
def worker():
    sys.path.insert(0, str(BENCH))
    try:
        import _gpu_check_worker

        yield _gpu_check_worker
    finally:
        sys.path.remove(str(BENCH))


def test_flight_recorder_dumps_decode_as_json_or_plain_pickles(worker):
    dump = {"version": "2.10", "entries": [{"profiling_name": "nccl:all_reduce"}]}
    assert worker._decode_dump(json.dumps(dump)) == dump
    assert worker._decode_dump(json.dumps(dump).encode()) == dump
    assert worker._decode_dump(pickle.dumps(dump)) == dump
    with pytest.raises(pickle.UnpicklingError):
        worker._decode_dump(pickle.dumps(Path("x")))  # a class: refused


def test_flight_recorder_without_a_job_answers_with_no_names():
    """In a process that ran no collective: the Flight Recorder is process-wide, and
    this one's may hold the gloo calls of tests that ran before."""
    code = "import json, _gpu_check_worker as w; print(json.dumps(w.flight_recorder()))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=BENCH,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH), *sys.path])},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    fr = json.loads(out.stdout.strip().splitlines()[-1])
    assert fr.get("names") == [] or "error" in fr
