"""Closing the trace: completions still being delivered are waited for, calls still in
flight are recorded for what they are."""

from __future__ import annotations

import threading
from pathlib import Path

import polars as pl
import pytest
import torch
from torch.futures import Future

from multirank import run_ranks
from syncpace.capture.config import TraceConfig
from syncpace.capture.tracer import Tracer
from syncpace.trace import RankTraceWriter, load_trace

# records and their status at close, never durations: they hold at any CPU load
pytestmark = pytest.mark.untimed

WORKER = Path(__file__).parent / "workers" / "closing.py"
ROW = (0, 0, "0", 2, 0, "all_reduce", 256, "float32", -1)


class SlowFutureWork(torch.distributed.Work):
    """A work whose future completes on another thread, ``delay_s`` after it is asked
    for: a backend thread delivering a completion while the main thread moves on."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.future: Future = Future()
        self.delay_s = delay_s

    def get_future(self) -> Future:
        threading.Timer(self.delay_s, lambda: self.future.set_result(None)).start()
        return self.future

    def is_completed(self) -> bool:
        return self.future.done()


def tracer_with_writer(tmp_path: Path, close_timeout_s: float) -> Tracer:
    tracer = Tracer(TraceConfig(dir=str(tmp_path), close_timeout_s=close_timeout_s))
    tracer.rank = 0
    tracer.writer = RankTraceWriter(tmp_path, 0, {"world_size": 2, "host": "h"}, journal_slots=1024)
    return tracer


@pytest.mark.parametrize(("timeout", "status"), [(2.0, "completed"), (0.0, "pending")])
def test_close_waits_for_a_completion_callback_still_to_run(tmp_path, timeout, status):
    """The record of a work consumed through its future is made by the future's
    callback; closing while that callback has not run yet waits for it (bounded).
    Without the wait the call is only known to be in flight."""
    tracer = tracer_with_writer(tmp_path, timeout)
    row = ROW + (tracer.now(),)
    token = tracer.begin(row)
    work = tracer.completed(SlowFutureWork(0.2), row, token)
    work.get_future()
    tracer.close("destroy" if status == "completed" else "exit")
    events = load_trace(tmp_path).events
    assert events["status"].to_list() == [status]
    assert (events["exit_ns"] > events["enter_ns"]).all() == (status == "completed")


@pytest.mark.multirank
def test_hundreds_of_future_records_all_land_before_destroy(tmp_path):
    run_ranks(WORKER, 2, ["futures", "200"], env={"TRACE_DIR": str(tmp_path)})
    trace = load_trace(tmp_path)
    assert trace.warnings == ()
    assert trace.events.group_by("rank").len().sort("rank").rows() == [(0, 200), (1, 200)]
    assert set(trace.events["status"]) == {"completed"}
    assert set(trace.events["timing"]) == {"future"}


@pytest.mark.multirank
@pytest.mark.parametrize(
    ("mode", "status", "closed_by"),
    [("inflight", "aborted", "destroy"), ("exit", "pending", "exit")],
)
def test_a_call_in_flight_at_close_is_recorded(tmp_path, mode, status, closed_by):
    """A receive nobody answers is in flight when the trace closes: destroying the
    group aborts it with the group; an exit leaves it pending."""
    run_ranks(WORKER, 2, [mode], env={"TRACE_DIR": str(tmp_path)})
    trace = load_trace(tmp_path)
    assert trace.warnings == ()
    assert {m["closed_by"] for m in trace.meta.values()} == {closed_by}
    recv = trace.events.filter(pl.col("op") == "recv").sort("rank")
    assert recv.select("rank", "peer", "status", "exit_ns").rows() == [
        (0, 1, status, -1),
        (1, 0, status, -1),
    ]
    if status == "aborted":
        assert set(recv["error"]) == {"in flight when the process group was destroyed"}
    done = trace.events.filter(pl.col("op") == "all_reduce")
    assert set(done["status"]) == {"completed"} and done.height == 2
