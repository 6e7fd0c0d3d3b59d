"""Whether several runs are one job, and whether two of them are the same run.

A scaling curve or a change against a baseline means something only between runs of
one job (one model, one way of parallelising it) at one or several world sizes. The
trace does not name the model, but what a job communicates per iteration tells it:
the collectives it issues and their payload. A tensor's size in a trace is the size
nccl-tests counts (the whole buffer, or the gathered total: ``docs/trace-format.md``),
the same at any world size, so a job's payload per iteration and rank stays put when
the job runs on more ranks (strong or weak scaling alike) and moves when the model or
the parallelism changes.

The same run given twice (the same directory, a copy of it, or a merged directory and
the node directories it came from) is no second measurement: it is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from syncpace.analysis.metrics import RunMetrics
from syncpace.errors import TraceError

#: Ops below this share of a run's bytes (a start-up broadcast, barriers) do not
#: characterise the job.
MINOR_SHARE = 0.01
#: Two runs are one job when each op's payload per iteration and rank agrees within
#: this factor (measured: one job's payload moves by well under 10 % between sizes).
PAYLOAD_FACTOR = 1.25


@dataclass(frozen=True)
class JobShape:
    """What one run communicates per iteration: its parallelism and, per op, the bytes
    a rank takes part in (each instance's size times its group's share of the world)."""

    run: str
    world_size: int
    parallelism: tuple[str, ...]
    payload: Mapping[str, float]

    def describe(self) -> str:
        ops = ", ".join(f"{op} {_bytes(b)}" for op, b in sorted(self.payload.items()))
        return f"{ops or 'no collectives'} per iteration"


def job_shape(run: RunMetrics) -> JobShape:
    inst = run.instances
    payload: dict[str, float] = {}
    if inst.height and run.world_size > 0:
        steps = max(inst["step"].n_unique(), 1)
        per_op = inst.group_by("op").agg(
            (pl.col("bytes").cast(pl.Float64) * pl.col("group_size")).sum() / run.world_size
        )
        total = float(per_op["bytes"].sum()) or 1.0
        payload = {
            op: b / steps
            for op, b in per_op.iter_rows()
            if op != "barrier" and b / total >= MINOR_SHARE
        }
    return JobShape(run.run, run.world_size, tuple(run.parallelism.kinds), payload)


def difference(a: JobShape, b: JobShape) -> str | None:
    """Why ``a`` and ``b`` are not one job, in words; ``None`` when they are."""
    if a.parallelism != b.parallelism:
        return f"parallelism {_kinds(a)} vs {_kinds(b)}"
    if set(a.payload) != set(b.payload):
        return f"collectives {', '.join(sorted(a.payload))} vs {', '.join(sorted(b.payload))}"
    for op, x in a.payload.items():
        y = b.payload[op]
        if max(x, y) > PAYLOAD_FACTOR * min(x, y):
            return f"{op} payload {_bytes(x)} vs {_bytes(y)} per iteration"
    return None


def one_job(shapes: Sequence[JobShape]) -> list[int]:
    """Per run, the index of the first run of its job (runs of one job share it)."""
    heads: list[int] = []
    out = []
    for i, shape in enumerate(shapes):
        same = next((h for h in heads if difference(shapes[h], shape) is None), None)
        if same is None:
            heads.append(i)
            same = i
        out.append(same)
    return out


def relation(shapes: Sequence[JobShape], names: Mapping[str, str] | None = None) -> str:
    """One line saying what runs of different jobs are (empty when they are one job)."""
    jobs = one_job(shapes)
    if len(set(jobs)) < 2:
        return ""
    names = names or {}
    heads = sorted(set(jobs))
    first, second = shapes[heads[0]], shapes[heads[1]]
    why = difference(first, second)
    listed = "; ".join(f"{names.get(s.run, s.run)}: {s.describe()}" for s in shapes)
    return (
        f"{len(heads)} different jobs ({why}), not one job at several sizes: side by side, "
        f"with no scaling curve and no change against a baseline of another job ({listed})"
    )


def run_identity(meta: Mapping[int, Mapping[str, Any]]) -> str:
    """What makes a run itself: its job id where every rank carries one, else all its
    ranks' metadata (start times, process ids, clocks) — equal only for a copy."""
    ids = {m.get("job_id") for m in meta.values()}
    if len(ids) == 1 and None not in ids:
        return f"job id {ids.pop()}"
    content = {str(r): _without_dir(m) for r, m in sorted(meta.items())}
    return json.dumps(content, sort_keys=True, default=str)


def refuse_repeats(
    runs: Sequence[tuple[str, Mapping[int, Mapping[str, Any]]]],
    same_data: Callable[[int, int], bool],
) -> None:
    """A :class:`~syncpace.errors.TraceError` naming the second of two runs that are
    the same run: the same job id, or identical metadata and ``same_data(i, j)`` (runs
    written without job ids, such as synthetic ones, may share their metadata)."""
    seen: dict[str, list[int]] = {}
    for i, (path, meta) in enumerate(runs):
        identity = run_identity(meta)
        for j in seen.get(identity, []):
            by_id = identity.startswith("job id")
            if by_id or same_data(j, i):
                what = identity if by_id else "identical files"
                raise TraceError(path, f"the same run as {runs[j][0]} ({what}): give each run once")
        seen.setdefault(identity, []).append(i)


def _kinds(shape: JobShape) -> str:
    return " + ".join(shape.parallelism) or "none recognised"


def _without_dir(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata but the directory it was written to and its checksum (a copy moves)."""
    out = {k: v for k, v in meta.items() if k != "checksum"}
    if isinstance(out.get("config"), dict):
        out["config"] = {k: v for k, v in out["config"].items() if k != "dir"}
    return out


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"
