"""The real profiled run the importer tests compare against.

One 4-rank DDP job on gloo (``workers/profiled_ddp.py``) is traced by syncpace (armed
from outside, as ``syncpace run`` arms a job) and profiled by torch.profiler in the same
processes, in two phases: so every importer test compares a converted trace with
syncpace's own trace of the very same collectives.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from multirank import SRC, check, launch, record_restart
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.trace import Trace, load_trace, schema
from syncpace.trace.writer import write_table

WORKER = Path(__file__).parent / "workers" / "profiled_ddp.py"
WORLD = 4
STEPS = 8  # per profiling phase
#: Launches of the job at most, when a rank dies of SIGSEGV (see ``profiled_run``).
CRASH_ATTEMPTS = 2
SLOW_RANK = 2
#: How much longer the slow rank computes each step (ms): the cost its straggler finding
#: must come to, against the measured iteration.
SLOW_MS = 40.0
#: Each step sleeps this long before its forward pass: neighbouring steps' calls are
#: this far apart, and half of it is the slack a loaded machine's timing error must
#: stay within (:func:`window`).
COMPUTE_MS = 12.0


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
    args += ["--slow-ms", str(SLOW_MS), "--compute-ms", str(COMPUTE_MS)]

    def reset() -> None:  # what a launch that failed at start-up left
        shutil.rmtree(sp, ignore_errors=True)
        shutil.rmtree(kineto)
        kineto.mkdir(parents=True)

    for attempt in range(1, CRASH_ATTEMPTS + 1):
        results = launch(WORKER, WORLD, args, timeout=240, reset=reset, env=env)
        crashed = [r.rank for r in results if r.returncode == -signal.SIGSEGV]
        if not crashed or attempt == CRASH_ATTEMPTS:
            break
        # A rank of this job died of SIGSEGV once, inside its first profiling phase
        # (Python stacks recorded), in a whole-suite run on two workers; twelve runs of
        # the job alone under load were clean. Started again once, and listed.
        record_restart(WORKER.name, attempt, f"rank {crashed[0]} died of SIGSEGV")
        reset()
    try:
        check(results)
    except AssertionError as exc:
        # the first rank to fail takes the others down ("Connection closed by peer"):
        # name every rank's last error and exit status, so the cause is in the report
        errors = {
            r.rank: (r.returncode, [ln for ln in r.stderr.splitlines() if "Error" in ln][-2:])
            for r in results
        }
        raise AssertionError(f"the profiled job failed: {errors}") from exc
    return ProfiledRun(sp, kineto, slow_rank)


def timeline_offsets(run: ProfiledRun, phase: str) -> dict[int, tuple[int, int]]:
    """Rank -> (where the tracer's timeline lies on the profiler's in ``phase``, ns; how
    far that can be off, ns), from how each was made, not fitted to the data compared.

    The profiler stamps the wall clock (CLOCK_REALTIME, from the TSC converted against
    pairs it measures at its start and end), measured around the phase by the worker as
    wall minus monotonic. The tracer stamps monotonic + its anchor (``clock.base_ns``),
    then adds its offset to rank 0. Both anchors are best-of-many bracketed reads (µs);
    the offsets to rank 0 are estimates within their uncertainty (each flush applies the
    latest, so two may differ by the sum of theirs)."""
    out = {}
    for r in range(WORLD):
        wall = json.loads((run.kineto_root / "clock" / f"rank{r}.json").read_text())[phase]
        clock = run.syncpace.meta[r]["clock"]
        shift = int(np.mean(wall)) - clock["base_ns"] - int(clock["offset_ns"] or 0)
        worst = max([s["uncertainty_ns"] for s in clock["samples"]], default=0)
        error = abs(wall[1] - wall[0]) + clock["base_error_ns"] + 2 * worst
        out[r] = (shift, error)
    return out


def on_profiler_timeline(trace: Trace, offsets: dict[int, tuple[int, int]]) -> Trace:
    """``trace`` with every time moved by its rank's offset onto the profiler's timeline."""
    shift = pl.DataFrame(
        {"rank": list(offsets), "shift": [v[0] for v in offsets.values()]},
        schema={"rank": trace.events.schema["rank"], "shift": pl.Int64},
    )

    def moved(df: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
        df = df.join(shift, on="rank", how="left")
        return df.with_columns(
            pl.when(pl.col(c) >= 0).then(pl.col(c) + pl.col("shift")).otherwise(pl.col(c))
            for c in cols
        ).drop("shift")

    return dataclasses.replace(
        trace,
        events=moved(trace.events, ["enter_ns", "exit_ns"]),
        steps=moved(trace.steps, ["start_ns", "end_ns"]),
    )


def matching_steps(imported: Trace, traced: Trace) -> dict[int, int]:
    """Imported step -> the tracer's step that ends at the same moment (a profiler
    numbers its iterations from its own start, the tracer from the job's); ``traced``
    on the profiler's timeline (:func:`on_profiler_timeline`)."""
    ours = imported.steps.filter(pl.col("rank") == 0).sort("end_ns")
    theirs = traced.steps.filter(pl.col("rank") == 0).sort("end_ns")
    tolerance = 0.4 * float((theirs["end_ns"] - theirs["start_ns"]).median())
    out = {}
    for step, end in ours.select("step", "end_ns").iter_rows():
        d = (theirs["end_ns"] - end).abs()
        if d.min() < tolerance:
            out[int(step)] = int(theirs["step"][d.arg_min()])
    return out


def window(
    trace: Trace, imported: Trace, slack_ns: int = int(COMPUTE_MS * 1e6) // 2
) -> pl.DataFrame:
    """The events of ``trace`` issued between the first and the last call ``imported``
    holds, per rank, give or take ``slack_ns``, both on one timeline. The tracer sees a
    call some µs before the profiler's op begins (on a busy machine its thread can be
    descheduled in between, or the timelines be known less well); the calls just
    outside a profiling window are at least a step's compute away, so half of it
    takes every call inside and none outside."""
    spans = imported.events.group_by("rank").agg(
        lo=pl.col("enter_ns").min() - slack_ns, hi=pl.col("enter_ns").max() + slack_ns
    )
    return (
        trace.events.join(spans, on="rank")
        .filter(pl.col("enter_ns").is_between(pl.col("lo"), pl.col("hi")))
        .drop("lo", "hi")
    )


ROWS = (schema.EVENTS_SUFFIX, schema.STEPS_SUFFIX)


def restricted(trace_dir: Path, steps: set[int], out: Path) -> Path:
    """A copy of the syncpace trace in ``trace_dir`` holding only ``steps``: the tracer's
    view of the window a profiler saw, for diagnosing the same iterations. Written as the
    tracer writes (checksummed batches, metadata declaring the rows kept), so the reader
    takes it as a whole trace, not a damaged one; host files are copied as they are."""
    out.mkdir(parents=True)
    kept: dict[str, int] = {}
    for path in sorted(trace_dir.iterdir()):
        if not path.name.startswith("rank-") or not path.name.endswith(ROWS):
            continue
        with pa.OSFile(str(path)) as f:
            table = pa.ipc.open_stream(f).read_all()
        table = table.filter(pc.is_in(table["step"], pa.array(sorted(steps), pa.int64())))
        kept[path.name] = table.num_rows
        write_table(out / path.name, table)
    for path in sorted(trace_dir.iterdir()):
        if path.name in kept:
            continue
        if not path.name.endswith(schema.META_SUFFIX) or not path.name.startswith("rank-"):
            shutil.copy(path, out / path.name)
            continue
        meta = json.loads(path.read_text())
        stem = path.name.removesuffix(schema.META_SUFFIX)
        meta["events_written"] = kept.get(stem + schema.EVENTS_SUFFIX, 0)
        meta["steps_written"] = kept.get(stem + schema.STEPS_SUFFIX, 0)
        meta[schema.CHECKSUM_KEY] = schema.meta_checksum(meta)
        (out / path.name).write_text(json.dumps(meta, indent=1, sort_keys=True))
    return out
