"""Real 4-rank gloo jobs with a planted hang or desync: the finding names the rank, the
group, the sequence number and the op; the culprit's stack shows the planted line; the
job's own exit codes and errors are what they are without syncpace.

Expected values come from the job's code (``workers/scenario.py``): the planted call is
call 1 of iteration STEP, so its sequence number is ``1 + STEP * CALLS + 1`` (a barrier
comes first); the lines come
from the ``# LINE:`` markers. The jobs run a few at a time (they mostly wait on short
timeouts); every wait is bounded.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import polars as pl
import pytest
from jobs import CULPRIT, WORLD, Job, constants, line_of

from syncpace.analysis import analyze, find_hang
from syncpace.cli.main import main
from syncpace.importers.flight_recorder import load_flight_recorder
from syncpace.trace import load_trace

pytestmark = pytest.mark.multirank

C = constants()
SETUP = 1  # the barrier after init_process_group
PLANTED_SEQ = SETUP + C["STEP"] * C["CALLS"] + 1
LAST_SEQ = SETUP + C["STEPS"] * C["CALLS"] - 1  # the skipping rank's barrier meets this one
OTHERS = tuple(r for r in range(WORLD) if r != CULPRIT)
PEER_GONE = ("Connection closed by peer", "Connection reset by peer")
TIMED_OUT = "Timed out waiting"
#: gloo's error on a rank whose peer closed the connection (that peer timed out first)
LOST = "connection closed by peer"

SPECS = {
    # each rank dumps Flight Recorder once its own stall record is out (~1 s): the
    # collective timeout leaves room for that on a loaded machine
    "sleep": {"fr": True, "pg_timeout": 6.0},
    "op": {"fr": True, "pg_timeout": 6.0},
    "skip": {},
    "size": {},
    # the driver kills the culprit: the others must still be waiting then, not timed out
    "kill": {"pg_timeout": 30.0},
    "freeze": {"pg_timeout": 30.0},
    "healthy": {},
}
UNTRACED = ("size",)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, Job]:
    todo = [Job(mode, tmp_path_factory.mktemp(mode), **spec) for mode, spec in SPECS.items()]
    todo += [Job(m, tmp_path_factory.mktemp(f"{m}-plain"), traced=False) for m in UNTRACED]
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = list(pool.map(Job.run, todo))
    return {(j.mode if j.traced else f"{j.mode}-plain"): j for j in done}


def stack_lines(finding, rank: int) -> list[str]:
    stack = next(s for s in finding.evidence["stacks"] if s["rank"] == rank)
    return stack["frames"]


def shows(frames: list[str], marker: str) -> bool:
    return any(f.endswith(f"scenario.py:{line_of(marker)})") for f in frames)


def check_point(finding, mode: str, seq: int, op: str) -> None:
    assert finding is not None and finding.mode == mode, finding
    e = finding.evidence
    assert (e["group"], e["seq"], e["op"]) == ("0", seq, op), e


def assert_timed_out(ranks) -> None:
    """Every rank waited out its timeout; one that times out first and exits can close
    the connection another still waits on, which then fails on that instead."""
    errors = [(r.rank, r.returncode, r.error[-300:]) for r in ranks]
    assert all(r.returncode == 1 for r in ranks), errors
    assert any(TIMED_OUT in r.error for r in ranks), errors
    assert all(TIMED_OUT in r.error or LOST in r.error.lower() for r in ranks), errors


def diagnosed(job: Job):
    _, finding = find_hang(load_trace(job.trace_dir))
    return finding


# The scenarios --------------------------------------------------------------------------


def test_rank_sleeping_before_a_collective(jobs):
    job = jobs["sleep"]
    live = job.live["finding"]
    assert job.live_culprit_alive, "the live diagnosis ran after the job ended"
    for finding in (live, diagnosed(job)):
        check_point(finding, "hang", PLANTED_SEQ, "all_reduce")
        assert finding.ranks == (CULPRIT,)
        missing = finding.evidence["missing"]
        assert [(m["rank"], m["state"]) for m in missing] == [(CULPRIT, "stuck")]
        assert shows(stack_lines(finding, CULPRIT), "planted-sleep")
    assert sorted(live.evidence["waiting"]) == list(OTHERS)
    assert live.evidence["since_ns"] > 0 and "planted" in live.summary
    # the job's own ending: the others time out, the sleeper is killed by the driver
    assert next(r for r in job.ranks if r.rank == CULPRIT).returncode == -9
    assert_timed_out([r for r in job.ranks if r.rank != CULPRIT])


def test_rank_skipping_one_collective(jobs):
    job = jobs["skip"]
    finding = diagnosed(job)
    # the skipping rank's final barrier meets the others' last all-reduce
    check_point(finding, "desync", LAST_SEQ, "all_reduce")
    assert finding.ranks == (CULPRIT,)
    m = finding.evidence["mismatch"]
    assert m["field"] == "op"
    assert {s["value"]: s["ranks"] for s in m["sides"]} == {
        "all_reduce": list(OTHERS),
        "barrier": [CULPRIT],
    }
    skip = finding.evidence["skip"]
    assert skip["step"] == C["STEP"] and skip["ranks"] == [CULPRIT]
    assert skip["counts"] == {str(CULPRIT): C["CALLS"] - 1} and skip["expected"] == C["CALLS"]
    assert shows(stack_lines(finding, CULPRIT), "final-barrier")
    assert_timed_out(job.ranks)


def test_op_mismatch(jobs):
    job = jobs["op"]
    finding = diagnosed(job)
    check_point(finding, "desync", PLANTED_SEQ, "all_reduce")
    assert finding.ranks == (CULPRIT,)
    sides = {s["value"]: s["ranks"] for s in finding.evidence["mismatch"]["sides"]}
    assert sides == {"all_reduce": list(OTHERS), "broadcast": [CULPRIT]}
    assert shows(stack_lines(finding, CULPRIT), "planted-op")
    assert sorted(finding.evidence["failed"]) == list(range(WORLD))


def test_size_mismatch(jobs):
    job = jobs["size"]
    finding = diagnosed(job)
    check_point(finding, "desync", PLANTED_SEQ, "all_reduce")
    m = finding.evidence["mismatch"]
    assert m["field"] == "bytes"
    sides = {s["value"]: s["ranks"] for s in m["sides"]}
    numel = 1024  # torch.ones(1024) in the worker, float32
    assert sides[str(2 * 4 * numel)] == [CULPRIT]
    # gloo aborts the rank that receives the larger message: it died of SIGABRT
    aborted = [r.rank for r in job.ranks if r.returncode == -6]
    assert len(aborted) == 1, [r.returncode for r in job.ranks]
    # the aborted rank's call is in its trace all the same: its crash journal held it
    # in flight when it died, and the reader recovered it as pending
    assert set(sides[str(4 * numel)]) == set(OTHERS)
    events = load_trace(job.trace_dir).events
    stuck = events.filter(pl.col("rank") == aborted[0], pl.col("seq") == PLANTED_SEQ)
    assert stuck.select("op", "bytes", "status").rows() == [("all_reduce", 4 * numel, "pending")]
    assert CULPRIT in finding.ranks and aborted[0] in finding.ranks
    died = {m["rank"]: m for m in finding.evidence["missing"]}
    assert died[aborted[0]]["state"] == "died"
    assert "Fatal Python error: Aborted" in died[aborted[0]]["doing"]
    assert shows(stack_lines(finding, CULPRIT), "planted-size")
    assert shows(stack_lines(finding, aborted[0]), "loop-all-reduce")
    for r in job.ranks:  # their connection to it closed, or what they waited for never came
        if r.rank not in aborted:
            assert r.returncode == 1 and any(s in r.error for s in (*PEER_GONE, TIMED_OUT))


def test_rank_killed_mid_run(jobs):
    job = jobs["kill"]
    finding = diagnosed(job)
    check_point(finding, "hang", PLANTED_SEQ, "all_reduce")
    assert finding.ranks == (CULPRIT,)
    (missing,) = finding.evidence["missing"]
    assert (missing["rank"], missing["state"]) == (CULPRIT, "died")
    assert shows(stack_lines(finding, CULPRIT), "planted-sleep")
    assert sorted(finding.evidence["failed"]) == list(OTHERS)
    assert job.ranks[CULPRIT].returncode == -9
    for r in job.ranks:
        if r.rank != CULPRIT:
            assert r.returncode == 1 and any(s in r.error for s in PEER_GONE), r.error


def test_rank_stuck_in_a_collective_whose_peer_died(jobs):
    job = jobs["freeze"]
    live = job.live["finding"]
    check_point(live, "hang", PLANTED_SEQ, "all_reduce")
    assert live.ranks == (CULPRIT,)
    assert [(m["rank"], m["state"]) for m in live.evidence["missing"]] == [(CULPRIT, "silent")]
    assert sorted(live.evidence["waiting"]) == list(OTHERS)
    waiting = next(s for s in live.evidence["stacks"] if s["role"] == "waiting")
    assert waiting["rank"] in OTHERS and shows(waiting["frames"], "loop-all-reduce")
    after = diagnosed(job)  # the frozen peer was then killed
    check_point(after, "hang", PLANTED_SEQ, "all_reduce")
    assert [(m["rank"], m["state"]) for m in after.evidence["missing"]] == [(CULPRIT, "died")]
    assert sorted(after.evidence["failed"]) == list(OTHERS)
    assert job.ranks[CULPRIT].returncode == -9
    assert all(r.returncode == 1 for r in job.ranks if r.rank != CULPRIT)


def test_healthy_job_has_no_hang(jobs, capsys):
    job = jobs["healthy"]
    assert all(r.returncode in (0, -6) and "WORKER_DONE" in r.stdout for r in job.ranks)
    trace = load_trace(job.trace_dir)
    assert all(s.state == "resolved" for s in trace.stalls.values())  # transient only
    analysis, finding = find_hang(trace)
    assert finding is None and analysis.points == ()
    assert not {f.mode for f in analyze(job.trace_dir).findings} & {"hang", "desync"}
    assert main(["hang", str(job.trace_dir)]) == 0
    assert "no hang" in capsys.readouterr().out


# What the job itself sees ---------------------------------------------------------------


@pytest.mark.parametrize("mode", UNTRACED)
def test_exit_codes_and_errors_are_the_jobs_own(jobs, mode):
    traced, plain = jobs[mode], jobs[f"{mode}-plain"]
    assert sorted(r.returncode for r in traced.ranks) == sorted(r.returncode for r in plain.ranks)
    kinds = sorted(r.error.split(":")[0] for r in traced.ranks)
    assert kinds == sorted(r.error.split(":")[0] for r in plain.ranks)
    # the error is the backend's own, raised through the tracer unchanged
    assert not any("syncpace" in r.error for r in traced.ranks)
    assert all(r.error for r in traced.ranks if r.returncode == 1)


def test_stall_records_reach_disk_before_the_job_fails(jobs):
    for mode in ("sleep", "op", "kill", "freeze"):
        trace = load_trace(jobs[mode].trace_dir)
        for rank, rec in trace.stalls.items():
            assert rec.written_ns - rec.since_ns >= rec.threshold_s * 1e9 or rec.kind in (
                "failed",
                "fatal",
            ), (mode, rank)
    # a rank that waited, then failed, had its stall record on disk before the error
    sleep = load_trace(jobs["sleep"].trace_dir)
    waited = sleep.events.filter(sleep.events["status"] != "completed")
    assert waited.height >= len(OTHERS)
    assert sleep.stalls[CULPRIT].kind == "no_progress" and sleep.stalls[CULPRIT].updates >= 2


# Flight Recorder dumps torch itself wrote during the same hangs -----------------------


@pytest.mark.parametrize("mode", ["sleep", "op"])
def test_flight_recorder_dumps_give_the_same_finding(jobs, mode, capsys):
    job = jobs[mode]
    _, ours = find_hang(load_trace(job.trace_dir))
    _, theirs = find_hang(load_flight_recorder([job.fr_dir]))
    assert theirs is not None and theirs.mode == ours.mode
    for key in ("group", "seq", "op"):
        assert theirs.evidence[key] == ours.evidence[key], key
    assert theirs.ranks == ours.ranks
    assert theirs.evidence["source"] == "flight_recorder"
    # the culprit's stack is the one Flight Recorder kept: its last (or this) call
    if mode == "op":
        assert shows(stack_lines(theirs, CULPRIT), "planted-op")
    else:
        assert shows(stack_lines(theirs, CULPRIT), "loop-all-reduce")
    assert main(["hang", "--json", str(job.fr_dir)]) == 1
    shown = json.loads(capsys.readouterr().out)["finding"]
    assert (shown["mode"], shown["evidence"]["seq"]) == (ours.mode, ours.evidence["seq"])
    assert main(["diagnose", "--json", str(job.fr_dir)]) == 0
    first = json.loads(capsys.readouterr().out)["findings"][0]
    assert (first["mode"], first["evidence"]["seq"]) == (ours.mode, ours.evidence["seq"])
