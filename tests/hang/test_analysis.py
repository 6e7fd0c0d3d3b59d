"""The hang diagnosis on traces built by hand: one case per rule, each able to fail.

A trace here is what a 4-rank job leaves: events (the trace schema) and stall records.
Times are seconds on a common clock; ``call(rank, seq, ...)`` is one collective.
"""

from __future__ import annotations

import pytest
from builders import LOADER, T0, USER, WORLD, S, ev, healthy_prefix, inflight, stall, trace

from syncpace.analysis import Thresholds, analyze, find_hang
from syncpace.analysis.detectors.hang import rank_list, short_error
from syncpace.analysis.hang.stacks import where_of
from syncpace.trace.merge import join_parts, merge_traces
from syncpace.trace.stall import Call, Frame, parse_fatal

# Rules --------------------------------------------------------------------------------


def test_a_finished_healthy_job_has_no_hang():
    analysis, finding = find_hang(trace(healthy_prefix(), finished=range(WORLD)))
    assert analysis.points == () and finding is None


def test_a_rank_in_the_data_loader_is_named_with_its_stack():
    others = {r: stall(r, in_flight=[inflight(5, 5.0 + r * 0.01)]) for r in (0, 1, 3)}
    culprit = stall(2, kind="no_progress", frames=(USER, LOADER), in_flight=())
    t = trace(healthy_prefix(), {**others, 2: culprit})
    analysis, f = find_hang(t)
    assert f.mode == "hang" and f.ranks == (2,) and f.nodes == ("h1",)
    e = f.evidence
    assert (e["group"], e["seq"], e["op"], e["bytes"]) == ("0", 5, "all_reduce", 4096)
    assert e["waiting"] == [0, 1, 3] and e["missing"][0]["state"] == "stuck"
    assert e["since_ns"] == T0 + 5 * S and e["since"] == "11:53:25 UTC"
    assert e["waited_s"] == pytest.approx(5.0)
    assert "rank 2 (node h1) never entered all_reduce seq 5 of group 0" in f.summary
    assert "__next__" in f.summary and "train.py:88" in f.summary
    culprit_stack = next(s for s in e["stacks"] if s["rank"] == 2)
    assert culprit_stack["frames"][-1].startswith("__next__") and culprit_stack["role"] == "culprit"


def test_a_rank_with_no_trace_at_all_is_named_absent():
    others = {r: stall(r, in_flight=[inflight(5, 5.0)]) for r in (0, 1, 2)}
    t = trace(healthy_prefix(ranks=range(3)), others, ranks=range(3))
    _, f = find_hang(t)
    assert f.ranks == (3,) and f.evidence["missing"][0]["state"] == "absent"
    assert "left no trace" in f.summary


def test_a_silent_rank_then_a_dead_one():
    events = healthy_prefix()
    others = {r: stall(r, in_flight=[inflight(5, 5.0)]) for r in (0, 1, 2)}
    _, live = find_hang(trace(events, others))
    assert live.evidence["missing"][0]["state"] == "silent"
    gone = "RuntimeError: [pair.cc:553] Connection closed by peer [10.0.0.3]:4242"
    failed = events + [ev(r, 5, 5.0, "failed", error=gone) for r in (0, 1, 2)]
    _, after = find_hang(trace(failed, others))
    assert after.evidence["missing"][0]["state"] == "died"
    assert after.evidence["failed"] == [0, 1, 2]
    assert "failed there with 'RuntimeError: Connection closed by peer" in after.summary


def test_a_rank_whose_record_outlives_the_failures_is_alive_not_dead():
    gone = "RuntimeError: Connection reset by peer"
    events = healthy_prefix() + [ev(r, 5, 5.0, "failed", error=gone) for r in (0, 1, 2)]
    culprit = stall(3, kind="no_progress", written=60.0)  # rewritten long after
    _, f = find_hang(trace(events, {3: culprit}))
    assert f.evidence["missing"][0]["state"] == "stuck"


def test_op_mismatch_is_a_desync_naming_the_odd_rank():
    calls = {
        r: stall(r, in_flight=[inflight(5, 5.0, op="broadcast" if r == 1 else "all_reduce")])
        for r in range(WORLD)
    }
    _, f = find_hang(trace(healthy_prefix(), calls))
    assert f.mode == "desync" and f.ranks == (1,)
    sides = {s["value"]: s["ranks"] for s in f.evidence["mismatch"]["sides"]}
    assert sides == {"all_reduce": [0, 2, 3], "broadcast": [1]}
    assert f.evidence["op"] == "all_reduce"  # the call as most ranks issued it


def test_a_tie_names_no_culprit_side():
    calls = {
        r: stall(r, in_flight=[inflight(5, 5.0, nbytes=4096 if r < 2 else 8192)])
        for r in range(WORLD)
    }
    _, f = find_hang(trace(healthy_prefix(), calls))
    assert f.mode == "desync" and f.evidence["mismatch"]["field"] == "bytes"
    assert f.ranks == (0, 1, 2, 3)  # no minority: every waiting rank is in question


def test_a_mismatch_in_completed_calls_is_a_desync_without_a_hang():
    events = healthy_prefix() + [ev(r, 5, 0.5, nbytes=8 if r == 3 else 4096) for r in range(4)]
    _, f = find_hang(trace(events, finished=range(WORLD)))
    assert f.mode == "desync" and f.ranks == (3,) and "seq 5" in f.summary
    assert "seq" not in f.evidence  # no hang point


def test_a_skipped_call_is_located_by_its_iteration():
    # 3 calls per step; rank 2 skips one in step 1: its seqs run one iteration ahead
    events = []
    for r in range(WORLD):
        seq = 0
        for step in range(3):
            for _ in range(2 if (r == 2 and step == 1) else 3):
                events.append(ev(r, seq, seq * 0.1, step=step))
                seq += 1
    last = {r: max(e[4] for e in events if e[0] == r) for r in range(WORLD)}
    stalls = {
        r: stall(
            r, in_flight=[inflight(last[r] + 1, 5.0, op="barrier" if r == 2 else "all_reduce")]
        )
        for r in range(WORLD)
    }
    _, f = find_hang(trace(events, stalls))
    assert f.mode == "desync" and f.ranks == (2,)
    assert f.evidence["skip"] == {
        "seq": 5,
        "step": 1,
        "ranks": [2],
        "counts": {"2": 2},
        "expected": 3,
    }
    assert "rank 2 issued 2 calls in step 1 where the others issued 3" in f.summary


def test_a_resolved_stall_is_no_hang():
    events = healthy_prefix()
    resolved = {r: stall(r, state="resolved", in_flight=()) for r in range(WORLD)}
    _, f = find_hang(trace(events, resolved, finished=range(WORLD)))
    assert f is None


def test_pending_calls_are_a_hang_only_after_waiting_long_enough():
    events = healthy_prefix() + [ev(r, 5, 5.0, "pending") for r in (0, 1, 2)]
    events = [e for e in events if (e[0], e[4]) != (3, 4)]
    events.append(ev(3, 4, 70.0))  # the data reaches 65 s past the wait's start
    th = Thresholds(hang_wait_s=60.0)
    _, short = find_hang(trace(events), Thresholds(hang_wait_s=120.0))
    _, long = find_hang(trace(events), th)
    assert short is None
    assert long is not None and long.mode == "hang" and long.confidence < 1.0


def test_a_failure_the_job_recovered_from_is_no_hang():
    events = healthy_prefix(8) + [ev(0, 3, 0.3, "timed_out")]
    events = [e for e in events if not (e[0] == 0 and e[4] == 3 and e[12] == "completed")]
    _, f = find_hang(trace(events, finished=range(WORLD)))
    assert f is None


def test_the_group_whose_wait_began_first_is_the_root():
    # rank 3 waits in group "1" (ranks 2, 3) since t=3 for rank 2, which went silent;
    # ranks 0-2... in group "0" wait for rank 3 since t=6: the root is group 1.
    t = trace(
        healthy_prefix(),
        {
            0: stall(0, in_flight=[inflight(5, 6.0)]),
            1: stall(1, in_flight=[inflight(5, 6.1)]),
            3: stall(3, in_flight=[inflight(0, 3.0, group="1")]),
        },
    )
    for m in t.meta.values():
        m["groups"]["1"] = {"ranks": [2, 3]}
    _, f = find_hang(t)
    assert (f.evidence["group"], f.evidence["seq"]) == ("1", 0)
    assert f.ranks == (2,) and f.evidence["other_groups"][0]["group"] == "0"


def test_per_node_directories_join_into_one_job():
    events = healthy_prefix()
    stalls = {r: stall(r, in_flight=[inflight(5, 5.0)]) for r in (0, 1, 3)}
    stalls[2] = stall(2, kind="no_progress")
    a = trace(
        [e for e in events if e[0] < 2],
        {r: s for r, s in stalls.items() if r < 2},
        ranks=range(2),
        path="node0",
    )
    b = trace(
        [e for e in events if e[0] >= 2],
        {r: s for r, s in stalls.items() if r >= 2},
        ranks=range(2, 4),
        path="node1",
    )
    (joined,) = join_parts([a, b])
    assert sorted(joined.meta) == [0, 1, 2, 3] and joined.missing_ranks == []
    _, f = find_hang(joined)
    assert f.ranks == (2,) and f.evidence["waiting"] == [0, 1, 3]
    whole = analyze([a, b])
    assert len(whole.runs) == 1 and whole.findings[0].mode == "hang"
    with pytest.raises(Exception, match="appear in two directories"):
        merge_traces([a, a])


def test_hang_and_desync_come_first_in_the_diagnosis():
    others = {r: stall(r, in_flight=[inflight(5, 5.0)]) for r in (0, 1, 3)}
    t = trace(healthy_prefix(), {**others, 2: stall(2, kind="no_progress")})
    findings = analyze(t).findings
    assert findings[0].mode == "hang" and findings[0].severity.name == "CRITICAL"


# Pieces -------------------------------------------------------------------------------


def test_where_names_the_library_frame_and_the_jobs_own():
    assert where_of((USER, LOADER)) == (
        "__next__ (/env/site-packages/torch/utils/data/dataloader.py:733), "
        "called from train_step (/job/train.py:88)"
    )
    tracer = Frame("/x/syncpace/capture/work.py", 60, "wait")
    assert where_of((USER, tracer)) == "train_step (/job/train.py:88)"


def test_short_errors_and_rank_lists():
    assert short_error("RuntimeError: [/a/b/pair.cc:553] Connection closed") == (
        "RuntimeError: Connection closed"
    )
    assert rank_list([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7-8" and rank_list([3]) == "rank 3"


def test_faulthandler_reports_parse_into_stacks():
    text = (
        "Fatal Python error: Aborted\n\n"
        "Thread 0x00007f8607a9a6c0 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 331 in wait\n\n'
        "Current thread 0x00007f8608800b80 (most recent call first):\n"
        '  File "/job/train.py", line 9 in inner\n'
        '  File "/job/train.py", line 10 in <module>\n\n'
        "Extension modules: numpy (total: 1)\n"
    )
    error, threads = parse_fatal(text)
    assert error == "Fatal Python error: Aborted" and len(threads) == 2
    main = [t for t in threads if t.main]
    assert len(main) == 1 and [f.function for f in main[0].frames] == ["<module>", "inner"]


def test_a_pipeline_recv_whose_sender_is_elsewhere():
    recv = Call("0", 4, "recv", 4096, "float32", peer=0, enter_ns=T0 + 5 * S)
    stalls = {
        1: stall(1, in_flight=[recv]),
        0: stall(0, kind="no_progress", frames=(USER, LOADER)),
    }
    _, f = find_hang(trace(healthy_prefix(), stalls))
    assert f.mode == "hang" and f.ranks == (0,)
    assert (f.evidence["op"], f.evidence["seq"], f.evidence["waiting"]) == ("recv", 4, [1])
    assert f.summary.startswith("rank 1 (node h0) waits in recv from rank 0 (seq 4 of that pair")
    assert "rank 0 (node h0) does not send it: it is in __next__" in f.summary
    # both sides in the transfer: no culprit to name on that pair
    send = Call("0", 4, "send", 4096, "float32", peer=1, enter_ns=T0 + 5 * S)
    stalls[0] = stall(0, in_flight=[send])
    analysis, _ = find_hang(trace(healthy_prefix(), stalls, finished=range(WORLD)))
    assert not [p for p in analysis.points if p.op in ("send", "recv")]
