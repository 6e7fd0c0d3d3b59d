"""The real profiled run the importer tests compare against.

One 4-rank DDP job on gloo (``workers/profiled_ddp.py``) is traced by syncpace (armed
from outside, as ``syncpace run`` arms a job) and profiled by torch.profiler in the same
processes, in two phases: so every importer test compares a converted trace with
syncpace's own trace of the very same collectives.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from multirank import SRC, check, join, start_ranks
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.trace import Trace, load_trace

WORKER = Path(__file__).parent / "workers" / "profiled_ddp.py"
WORLD = 4
STEPS = 8  # per profiling phase
SLOW_RANK = 2


@dataclass(frozen=True)
class ProfiledRun:
    syncpace_dir: Path
    kineto_root: Path
    slow_rank: int

    @property
    def syncpace(self) -> Trace:
        return load_trace(self.syncpace_dir)

    @property
    def stack_dir(self) -> Path:
        """Phase 1: scheduled, with_stack, gzip'd by tensorboard_trace_handler."""
        return self.kineto_root / "stack"

    @property
    def plain_dir(self) -> Path:
        """Phase 2: no schedule, export_chrome_trace."""
        return self.kineto_root / "plain"


def profiled_run(root: Path, *, slow_rank: int = SLOW_RANK) -> ProfiledRun:
    sp, kineto = root / "syncpace", root / "kineto"
    kineto.mkdir(parents=True)
    env = traced_env(sp, TraceConfig(dir=str(sp), flush_interval_s=0.2), {"PYTHONPATH": SRC})
    args = ["--out", str(kineto), "--steps", str(STEPS), "--slow-rank", str(slow_rank)]
    args += ["--slow-ms", "40"]
    check(join(start_ranks(WORKER, WORLD, args, env=env), timeout=240))
    return ProfiledRun(sp, kineto, slow_rank)


def matching_steps(imported: Trace, traced: Trace) -> dict[int, int]:
    """Imported step -> the tracer's step that ends at the same moment (a profiler
    numbers its iterations from its own start, the tracer from the job's)."""
    ours = imported.steps.filter(pl.col("rank") == 0).sort("end_ns")
    theirs = traced.steps.filter(pl.col("rank") == 0).sort("end_ns")
    tolerance = 0.4 * float((theirs["end_ns"] - theirs["start_ns"]).median())
    out = {}
    for step, end in ours.select("step", "end_ns").iter_rows():
        d = (theirs["end_ns"] - end).abs()
        if d.min() < tolerance:
            out[int(step)] = int(theirs["step"][d.arg_min()])
    return out


def window(trace: Trace, imported: Trace, slack_ns: int = 1_000_000) -> pl.DataFrame:
    """The events of ``trace`` issued while ``imported``'s steps ran, per rank, give or take
    ``slack_ns`` (the tracer sees a call some µs before the profiler's c10d op begins)."""
    spans = imported.steps.group_by("rank").agg(
        lo=pl.col("start_ns").min() - slack_ns, hi=pl.col("end_ns").max() + slack_ns
    )
    return (
        trace.events.join(spans, on="rank")
        .filter(pl.col("enter_ns").is_between(pl.col("lo"), pl.col("hi")))
        .drop("lo", "hi")
    )


def restricted(trace_dir: Path, steps: set[int], out: Path) -> Path:
    """A copy of the syncpace trace in ``trace_dir`` holding only ``steps``: the tracer's
    view of the window a profiler saw, for diagnosing the same iterations."""
    out.mkdir(parents=True)
    for path in sorted(trace_dir.iterdir()):
        if not path.name.endswith(".arrow"):
            shutil.copy(path, out / path.name)
            continue
        with pa.OSFile(str(path)) as f:
            table = pa.ipc.open_stream(f).read_all()
        table = table.filter(pc.is_in(table["step"], pa.array(sorted(steps), pa.int64())))
        with pa.OSFile(str(out / path.name), "wb") as sink:
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
    return out
