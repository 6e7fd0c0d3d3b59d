"""The GPU check's figures: pure functions of what its runs wrote (no torch, no GPU).

``gpu_check.py`` runs the jobs and reads their traces and profiles; everything it
concludes is computed here, from plain lists and dicts, so that every rule can be tested
on a machine without a GPU (``tests/bench/test_gpu_check.py``). Times are ns on the
trace's clock and µs in the profiler's Chrome trace, as each source writes them.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: The Chrome-trace categories of work the device ran (kineto's names).
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: Categories of host calls that launch device work and carry its correlation id.
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
#: A measured span within this fraction of the profiler's is "within 5 %".
TOLERANCE = 0.05
#: The name each measured call of the device-time job is marked with in the profile.
MARKER = "gpu_check:call"


# Statistics --------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation between order statistics (as
    numpy's default); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    """The median; NaN for no values (a figure that could not be measured)."""
    return statistics.median(values) if values else math.nan


def rounded(value: float, digits: int = 4) -> float | None:
    """``value`` for the JSON: rounded, and None where it is not a number."""
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


# (a) Device times against the profiler ------------------------------------------------
@dataclass(frozen=True)
class Window:
    """The device work the profiler saw for one call: from the start of its first
    activity to the end of its last (µs), and the time any of them ran."""

    start_us: float
    end_us: float
    busy_us: float
    activities: int

    @property
    def extent_us(self) -> float:
        return self.end_us - self.start_us


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """Time covered by at least one of ``intervals`` (overlapping copies count once)."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def call_windows(events: Iterable[dict[str, Any]], marker: str) -> list[Window | None]:
    """The device work of each call a job marked with ``record_function(marker)``, in
    the order of the marks (None: the profiler saw no device work for that call).

    Contract of the job that wrote the profile: the device was synchronised before each
    mark, so every activity of call *i* was launched after mark *i* began and before mark
    *i + 1* began. An activity is given to the last mark that began before its launch
    (the runtime or driver call with the same correlation id), or before its own start
    where the launch is not in the profile (the device's times are on the host's time
    line in kineto's traces, so the order still holds)."""
    events = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    marks = sorted(
        float(e["ts"])
        for e in events
        if e.get("name") == marker and not str(e.get("cat", "")).startswith("gpu_")
    )
    launches: dict[Any, float] = {}
    for e in events:
        correlation = (e.get("args") or {}).get("correlation")
        if e.get("cat") in LAUNCH_CATEGORIES and correlation is not None:
            launches[correlation] = float(e["ts"])
    spans: list[list[tuple[float, float]]] = [[] for _ in marks]
    for e in events:
        if e.get("cat") not in DEVICE_CATEGORIES:
            continue
        start = float(e["ts"])
        end = start + float(e.get("dur", 0.0))
        launched = launches.get((e.get("args") or {}).get("correlation"), start)
        index = _last_at_or_before(marks, launched)
        if index >= 0:
            spans[index].append((start, end))
    return [
        Window(min(s for s, _ in x), max(e for _, e in x), _union_us(x), len(x)) if x else None
        for x in spans
    ]


def _last_at_or_before(ordered: list[float], value: float) -> int:
    """Index of the last of ``ordered`` that is <= ``value``; -1 when none is."""
    low, high = 0, len(ordered)
    while low < high:
        middle = (low + high) // 2
        if ordered[middle] <= value:
            low = middle + 1
        else:
            high = middle
    return low - 1


def compare_spans(spans_ns: Sequence[int], windows: Sequence[Window | None]) -> dict[str, Any]:
    """The trace's device time of each call (``device_exit_ns - device_enter_ns``, -1
    where it has none) against the profiler's window of the same call, matched in order.

    ``ratio`` = traced span / profiler extent, per call with both. The span starts when
    the issuing stream reaches the call and ends when that stream has waited for it, so
    it is expected a little longer than the device work itself: ``excess_us`` (span -
    extent) says by how much, which is the explanation where the ratio is not within
    5 %."""
    pairs = [
        (span / 1000, window.extent_us)
        for span, window in zip(spans_ns, windows, strict=False)
        if span >= 0 and window is not None and window.extent_us > 0
    ]
    ratios = [span / extent for span, extent in pairs]
    excess = [span - extent for span, extent in pairs]
    result = {
        "calls_traced": len(spans_ns),
        "calls_with_device_times": sum(1 for s in spans_ns if s >= 0),
        "calls_profiled": len(windows),
        "calls_with_device_work": sum(1 for w in windows if w is not None),
        "matched": len(pairs),
        "median_ratio": rounded(median(ratios)),
        "p90_ratio": rounded(percentile(ratios, 0.9)),
        "min_ratio": rounded(min(ratios, default=math.nan)),
        "median_span_us": rounded(median([s for s, _ in pairs]), 2),
        "median_profiler_us": rounded(median([e for _, e in pairs]), 2),
        "median_excess_us": rounded(median(excess), 2),
        "p90_excess_us": rounded(percentile(excess, 0.9), 2),
    }
    result["within_5pct"] = within_tolerance(ratios)
    return result


def within_tolerance(ratios: Sequence[float], tolerance: float = TOLERANCE) -> bool:
    """Whether the median ratio and the 90th percentile are both within ``tolerance``
    of 1 (False with no ratio: nothing was shown)."""
    if not ratios:
        return False
    return abs(median(ratios) - 1) <= tolerance and abs(percentile(ratios, 0.9) - 1) <= tolerance


# (b) Run-ahead and who arrives last ---------------------------------------------------
def run_ahead_ms(rows: Iterable[dict[str, Any]]) -> dict[int, float | None]:
    """Per rank, the median of ``device_enter_ns - enter_ns`` (ms): how far the host ran
    ahead of the device when it issued a call. Calls without device times are left out;
    a rank with none reads None."""
    per_rank: dict[int, list[float]] = {}
    for row in rows:
        values = per_rank.setdefault(int(row["rank"]), [])
        if row["device_enter_ns"] >= 0 and row["enter_ns"] >= 0:
            values.append((row["device_enter_ns"] - row["enter_ns"]) / 1e6)
    return {rank: rounded(median(v), 3) for rank, v in sorted(per_rank.items())}


def last_arrivals(rows: Iterable[dict[str, Any]], column: str) -> dict[int, int]:
    """How often each rank was the last to arrive at a call (one call: a group and
    sequence number across ranks) by ``column`` (``enter_ns``: the host's issue,
    ``device_enter_ns``: the device's arrival). Calls some rank has no time for are
    left out."""
    calls: dict[tuple[Any, Any], list[tuple[int, int]]] = {}
    for row in rows:
        calls.setdefault((row["group"], row["seq"]), []).append((row[column], int(row["rank"])))
    counts: Counter[int] = Counter()
    for arrivals in calls.values():
        if len(arrivals) > 1 and all(t >= 0 for t, _ in arrivals):
            counts[max(arrivals)[1]] += 1
    return dict(sorted(counts.items()))


def mostly(counts: dict[int, int]) -> int | None:
    """The rank counted most often (None when nothing was counted)."""
    return max(counts, key=lambda rank: (counts[rank], -rank)) if counts else None


def finding_lines(findings: Any, limit: int = 8) -> list[str]:
    """One line per finding of ``syncpace diagnose --json``, read without assuming its
    fields: ``mode`` (or ``kind``), ``ranks`` and ``summary`` where a finding has them."""
    if not isinstance(findings, list):
        return []
    lines = []
    for finding in findings[:limit]:
        if not isinstance(finding, dict):
            lines.append(str(finding)[:160])
            continue
        what = finding.get("mode") or finding.get("kind") or "finding"
        ranks = finding.get("ranks")
        where = f" ranks {ranks}" if ranks else ""
        lines.append(f"{what}{where}: {str(finding.get('summary', ''))[:160]}")
    return lines


# (c) Pacing on the device --------------------------------------------------------------
def pacing_figures(
    calls: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]], first_measured: int
) -> dict[str, Any]:
    """What a delay placed on the device did, from one rank's trace.

    ``calls``: the first call of each step (``step``, ``device_enter_ns``,
    ``device_exit_ns``); ``steps``: the step rows (``step``, ``start_ns``, ``end_ns``,
    ``pacing_delay_ns``, ``device_delay_ns``). From ``first_measured`` on, a step's
    device *gap* is its call's device arrival minus the previous call's device exit:
    the work queued between the two calls, plus any delay placed there. The *shift* is
    the median gap of the steps the pacer delayed minus that of the others; the host
    step time of a delayed step says whether the host slept."""
    by_step = {int(c["step"]): c for c in calls}
    gaps: dict[int, float] = {}
    for step, call in by_step.items():
        before = by_step.get(step - 1)
        if step < first_measured or before is None:
            continue
        if call["device_enter_ns"] >= 0 and before["device_exit_ns"] >= 0:
            gaps[step] = call["device_enter_ns"] - before["device_exit_ns"]
    delayed = [s for s in steps if s["pacing_delay_ns"] > 0 and s["step"] >= first_measured]
    delayed_steps = {int(s["step"]) for s in delayed}
    plain = [g for step, g in gaps.items() if step not in delayed_steps]
    host_ns = {int(s["step"]): s["end_ns"] - s["start_ns"] for s in steps}
    plain_host = [host_ns[s] for s in host_ns if s >= first_measured and s not in delayed_steps]
    rows = [
        {
            "step": int(s["step"]),
            "pacing_delay_ms": s["pacing_delay_ns"] / 1e6,
            "device_delay_ms": s["device_delay_ns"] / 1e6,
            "host_step_ms": rounded(host_ns[int(s["step"])] / 1e6, 3),
            "device_gap_ms": rounded(gaps.get(int(s["step"]), math.nan) / 1e6, 3),
        }
        for s in delayed
    ]
    delay_ns = median([s["pacing_delay_ns"] for s in delayed])
    shift_ns = median([gaps[s] for s in delayed_steps if s in gaps]) - median(plain)
    return {
        "delay_ms": rounded(delay_ns / 1e6, 3),
        "shift_ms": rounded(shift_ns / 1e6, 3),
        "plain_gap_ms": rounded(median(plain) / 1e6, 3),
        "plain_host_step_ms": rounded(median(plain_host) / 1e6, 3),
        "delayed_steps": rows,
        "on_device": sum(1 for s in delayed if s["device_delay_ns"] == s["pacing_delay_ns"]),
        "host_slept": sum(1 for s in delayed if host_ns[int(s["step"])] >= s["pacing_delay_ns"]),
    }


def pacing_checks(figures: dict[str, Any], tolerance: float = 0.1) -> dict[str, bool]:
    """The pacing part's verdicts: every delayed step placed on the device, the host
    never slept a delay, and the device arrival moved by the delay within
    ``tolerance`` (the spin kernel's calibration) or 0.5 ms, whichever is larger."""
    delayed = figures["delayed_steps"]
    delay, shift = figures["delay_ms"], figures["shift_ms"]
    shifted = (
        delay is not None
        and shift is not None
        and abs(shift - delay) <= max(tolerance * delay, 0.5)
    )
    return {
        "placed_on_device": bool(delayed) and figures["on_device"] == len(delayed),
        "host_did_not_sleep": bool(delayed) and figures["host_slept"] == 0,
        "arrival_shifted_by_delay": shifted,
    }


# (d) Flight Recorder against the trace ---------------------------------------------------
def fr_op(profiling_name: str) -> str:
    """A Flight Recorder entry's op as the trace names it (``"nccl:all_reduce"`` ->
    ``all_reduce``), through the importer's table."""
    from syncpace.importers.flight_recorder import _op  # the one table of FR names

    return _op(str(profiling_name))[0]


def count_ops(names: Iterable[str]) -> dict[str, int]:
    """Calls per op, ops sorted by name."""
    return dict(sorted(Counter(names).items()))


def compare_workload(
    traced: dict[str, Any], untraced: dict[str, Any], trace_ops: dict[str, int]
) -> dict[str, Any]:
    """One workload run traced and untraced (each: ``losses`` as ``float.hex``, ``fr``
    with ``counts`` by op or an ``error``), and the traced run's trace counts by op.

    Counts are compared per op: the trace against the Flight Recorder of the same run,
    and the Flight Recorder of both runs (tracing must not change what reaches NCCL).
    Losses must be bit-identical step by step. A job that issued no collective (FSDP2
    at world size 1 skips them) passes the count checks with a ``note`` saying so."""
    fr_traced = (traced.get("fr") or {}).get("counts")
    fr_untraced = (untraced.get("fr") or {}).get("counts")
    losses_t, losses_u = traced.get("losses") or [], untraced.get("losses") or []
    checks = {
        "counts_equal": fr_traced is not None and fr_traced == trace_ops,
        "fr_unchanged_by_tracing": fr_traced is not None and fr_traced == fr_untraced,
        "losses_identical": bool(losses_t) and losses_t == losses_u,
    }
    collectives = sum(trace_ops.values())
    return {
        "note": None if collectives else "no collective in the trace: counts compare 0 with 0",
        "trace_counts": trace_ops,
        "fr_counts_traced": fr_traced,
        "fr_counts_untraced": fr_untraced,
        "fr_source": (traced.get("fr") or {}).get("source"),
        "fr_error": (traced.get("fr") or {}).get("error"),
        "collectives": collectives,
        "losses_traced": [float.fromhex(x) for x in losses_t],
        "losses_untraced": [float.fromhex(x) for x in losses_u],
        "checks": checks,
    }


# (e) Overhead -----------------------------------------------------------------------------
BOTH = (False, True)


def overhead_figures(runs: Sequence[dict[str, Any]], collectives_per_step: float) -> dict:
    """Traced and untraced runs of one job, alternated (each: ``traced``, ``step_s``
    and ``cpu_s``: per-step wall and process CPU seconds).

    ``ratio`` = median step time untraced / traced (1.0: free; the goal is >= 0.99),
    from the median of each run; ``pair_ratios`` the same per adjacent pair.
    ``cpu_us_per_collective`` = (CPU per step traced - untraced) / collectives per step:
    the host time tracing adds per call, on every thread of the process. A run's CPU
    per step is its mean, not its median: the tracer's flush thread works in bursts
    (once a second), which a median would leave out."""
    wall = {flag: [median(r["step_s"]) for r in runs if r["traced"] is flag] for flag in BOTH}
    cpu = {flag: [_mean(r["cpu_s"]) for r in runs if r["traced"] is flag] for flag in BOTH}
    untraced, traced = wall[False], wall[True]
    ratio = median(untraced) / median(traced) if untraced and traced else math.nan
    added_s = median(cpu[True]) - median(cpu[False])
    per_call = added_s / collectives_per_step * 1e6 if collectives_per_step > 0 else math.nan
    return {
        "runs": len(runs),
        "step_ms_untraced": rounded(median(untraced) * 1e3, 3),
        "step_ms_traced": rounded(median(traced) * 1e3, 3),
        "ratio": rounded(ratio),
        "pair_ratios": [rounded(u / t) for u, t in zip(untraced, traced, strict=False)],
        "cpu_ms_per_step_untraced": rounded(median(cpu[False]) * 1e3, 3),
        "cpu_ms_per_step_traced": rounded(median(cpu[True]) * 1e3, 3),
        "collectives_per_step": rounded(collectives_per_step, 1),
        "cpu_us_per_collective": rounded(per_call, 2),
    }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def per_step_counts(steps: Iterable[int], first: int) -> float:
    """The median number of calls per step from ``first`` on (``steps``: the step of
    each call); 0 with none."""
    counts = Counter(s for s in steps if s >= first)
    return float(median(list(counts.values()))) if counts else 0.0


# Environment and the report ----------------------------------------------------------------
def nccl_version_text(version: Any) -> str | None:
    """``torch.cuda.nccl.version()`` as text: a tuple (2, 21, 5[, suffix]) in current
    torch, a packed integer (2 * 1000 + 21 * 100 + 5, or the 2.19+ encoding) in old."""
    if version is None:
        return None
    if isinstance(version, (tuple, list)):
        numbers = [str(v) for v in version if isinstance(v, int)]
        suffix = "".join(str(v) for v in version if not isinstance(v, int))
        return ".".join(numbers) + (f"-{suffix}" if suffix else "")
    if isinstance(version, int):
        if version >= 10000:  # NCCL_VERSION_CODE since 2.9: major*10000 + minor*100 + patch
            return f"{version // 10000}.{version // 100 % 100}.{version % 100}"
        return f"{version // 1000}.{version // 100 % 10}.{version % 100}"
    return str(version)


def part_ok(part: dict[str, Any]) -> bool:
    """A part held when it ran to the end and every check it made held."""
    checks = part.get("checks") or {}
    return part.get("status") == "ok" and bool(checks) and all(checks.values())


def assemble(environment: dict[str, Any], parts: dict[str, dict], elapsed_s: float) -> dict:
    """The report written as JSON: the machine, each part as it ended (``status``:
    ``ok``, ``failed``, ``timeout`` or ``skipped``; its figures, checks and errors),
    and which parts held."""
    return {
        "format": "syncpace-gpu-check/1",
        "environment": environment,
        "elapsed_s": round(elapsed_s, 1),
        "parts": parts,
        "held": {name: part_ok(part) for name, part in parts.items()},
        "all_held": bool(parts) and all(part_ok(part) for part in parts.values()),
    }


def summary_lines(report: dict[str, Any]) -> list[str]:
    """A readable summary of ``report``: the machine, then one or more lines per part."""
    env = report.get("environment") or {}
    lines = [
        "syncpace GPU check: {} | driver {} | CUDA {} | NCCL {} | torch {}".format(
            env.get("gpu", "?"),
            env.get("driver", "?"),
            env.get("cuda", "?"),
            env.get("nccl", "?"),
            env.get("torch", "?"),
        )
    ]
    for name, part in report.get("parts", {}).items():
        verdict = "held" if part_ok(part) else part.get("status", "?")
        if verdict == "ok":
            verdict = "checks failed"
        lines.append(f"({name}) {part.get('title', '')}: {verdict} ({part.get('elapsed_s', 0)} s)")
        lines += [f"    {line}" for line in part.get("summary", [])]
        failed = [k for k, v in (part.get("checks") or {}).items() if not v]
        if failed:
            lines.append(f"    failed checks: {', '.join(failed)}")
        if part.get("error"):
            lines.append(f"    error: {str(part['error']).splitlines()[-1][:300]}")
    lines.append("all parts held" if report.get("all_held") else "not every part held")
    return lines
