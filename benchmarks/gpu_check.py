"""Does device timing hold on a real GPU? One run on one GPU, every figure as JSON.

Made for a machine with one NVIDIA GPU (H100 or H200), torch with CUDA, and this tree
installed over it (``pip install --no-deps -e .``, or ``PYTHONPATH=src``). Not yet run
on a GPU.

(a) Device time against the profiler: large all-reduces, 1 rank on NCCL and 4
    processes on gloo with CUDA tensors (NCCL refuses two ranks on one GPU); each call's
    traced device time (``device_exit_ns - device_enter_ns``) against the device work
    ``torch.profiler`` saw for the same call, matched in order: median and p90 ratio.
(b) A CPU-bound rank (the host sleeps before each all-reduce) and a GPU-bound rank
    (matrix products queued before each), gloo on CUDA tensors: each rank's median
    run-ahead (``device_enter_ns - enter_ns``), which rank arrives last by host and by
    device time, and the findings of ``syncpace diagnose --json`` on the trace.
(c) Pacing on the device: 1 rank on NCCL, fixed delays on chosen steps; the shift of
    the device arrival against steps without delay, and the host not sleeping.
(d) ``torch.compile(DDP(model))``, FSDP2 and a 1-D device mesh on NCCL at world size 1:
    collective counts from torch's Flight Recorder and from the trace, and the loss of
    every step traced vs untraced (separate processes, same seed).
(e) Overhead: a bf16 stack of transformer layers under DDP with >= 50 bucket
    all-reduces per step, traced and untraced in alternating processes: the median
    step-time ratio untraced / traced (goal >= 0.99) and the host CPU added per
    collective.
The machine: GPU, driver, CUDA, NCCL and torch versions.

Each part runs in a process of its own (its own session: a timeout kills it with its
ranks) with its own time limit, inside one budget for the whole check (470 s); it
rewrites its figures as they come, so a hang or a crash keeps what it had and costs the
other parts nothing. Without CUDA the check prints one line and exits 0.

    python benchmarks/gpu_check.py [--out gpu-check.json] [--parts abcde] [--keep DIR]

Exit status 0 when every part ran and held its checks (or there is no CUDA), else 1;
the JSON is written in both cases.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _gpu_check_figures import (
    MARKER,
    assemble,
    call_windows,
    compare_spans,
    compare_workload,
    count_ops,
    finding_lines,
    fr_op,
    last_arrivals,
    median,
    mostly,
    overhead_figures,
    pacing_checks,
    pacing_figures,
    per_step_counts,
    run_ahead_ms,
    summary_lines,
)

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_gpu_check_worker.py"
SRC = HERE.parent / "src"

#: The whole check's budget (s): under the 8 minutes it is given, with room to write.
BUDGET_S = 470.0
#: A part's process is killed this long after its limit (it saves before the limit).
GRACE_S = 10.0
#: A part's ranks must be done this long before its limit, so it can save what it found.
MARGIN_S = 8.0
#: A part with less time than this left in the budget is skipped.
MIN_PART_S = 30.0
#: How a traced rank is set up where a job marks its own steps.
TRACED = {"step_hook": False, "flush_interval_s": 0.2}


class WorkerError(Exception):
    """Ranks of a job failed or did not finish; ``logs``: the tail of each one's output."""

    def __init__(self, message: str, logs: dict[str, str]) -> None:
        super().__init__(message)
        self.logs = logs

    def to_json(self) -> dict[str, Any]:
        return {"error": str(self), "logs": self.logs}


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment, with this tree's sources importable (installed or not)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _write_json(path: Path, data: Any) -> None:
    """Write ``data`` whole or not at all (a reader never sees half a file)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2, default=str))
    partial.replace(path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# Jobs ------------------------------------------------------------------------------------
@dataclass
class Job:
    """The ranks of one job, started; :meth:`wait` collects their results."""

    label: str
    procs: list[subprocess.Popen]
    logs: list[Path]
    results: list[Path]

    def wait(self, timeout: float) -> list[dict[str, Any]]:
        """Each rank's result. Raises :class:`WorkerError` when a rank wrote none (it
        failed, or the job ran past ``timeout`` and was killed). A rank that wrote its
        result and then failed at teardown counts as done."""
        deadline = time.monotonic() + timeout
        try:
            for proc in self.procs:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            raise WorkerError(f"{self.label}: not done in {timeout:.0f} s", self.tails()) from None
        missing = [r for r, path in enumerate(self.results) if not path.exists()]
        if missing:
            codes = [self.procs[r].returncode for r in missing]
            raise WorkerError(f"{self.label}: ranks {missing} exited {codes}", self.tails())
        return [json.loads(path.read_text()) for path in self.results]

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def tails(self) -> dict[str, str]:
        return {str(rank): _tail(log) for rank, log in enumerate(self.logs)}


@dataclass
class Context:
    """One part's run: its folder, its deadline (``time.monotonic``), and the figures,
    checks and summary it has so far, rewritten to ``out`` by :meth:`save`."""

    work: Path
    deadline: float
    out: Path | None = None
    part: dict[str, Any] = field(
        default_factory=lambda: {"figures": {}, "checks": {}, "summary": []}
    )

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self) -> None:
        if self.out is not None:
            _write_json(self.out, self.part)

    def start(
        self,
        kind: str,
        spec: dict[str, Any],
        world: int = 1,
        *,
        label: str,
        env: dict[str, str] | None = None,
    ) -> Job:
        """Start ``world`` ranks of the worker's job ``kind`` on this host, as torchrun
        would (rank and rendezvous in the environment); output goes to one log each."""
        from syncpace.ports import free_port

        self.work.mkdir(parents=True, exist_ok=True)
        spec = dict(spec, result=str(self.work / f"{label}-rank{{rank}}.json"))
        base = child_env(env)
        port = str(free_port())
        procs, logs = [], []
        for rank in range(world):
            rank_env = dict(
                base,
                RANK=str(rank),
                WORLD_SIZE=str(world),
                LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(world),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            )
            log = self.work / f"{label}-rank{rank}.log"
            with open(log, "w") as out:
                command = [sys.executable, str(WORKER), kind, json.dumps(spec)]
                procs.append(
                    subprocess.Popen(command, env=rank_env, stdout=out, stderr=subprocess.STDOUT)
                )
            logs.append(log)
        results = [Path(spec["result"].format(rank=rank)) for rank in range(world)]
        return Job(label, procs, logs, results)

    def timeout(self, limit_s: float) -> float:
        """What a job may take: ``limit_s``, or what is left before the part must save."""
        left = self.left() - MARGIN_S
        if left < 5:
            raise WorkerError("no time left in this part's limit", {})
        return min(limit_s, left)

    def launch(
        self,
        kind: str,
        spec: dict[str, Any],
        world: int = 1,
        *,
        label: str,
        limit_s: float,
        env: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Run a job to its end (see :meth:`start`, :meth:`Job.wait`)."""
        timeout = self.timeout(limit_s)
        return self.start(kind, spec, world, label=label, env=env).wait(timeout)


def attempt(run: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``run(*args)``'s figures, or what went wrong: one job of a part failing (its
    ranks, or reading what they wrote) leaves the part's other jobs to run."""
    try:
        return run(*args)
    except WorkerError as exc:
        return exc.to_json()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def _load(trace: Path) -> Any:
    from syncpace.trace import load_trace

    return load_trace(trace)


def _device_clocks(loaded: Any) -> dict[str, Any]:
    return {str(rank): meta.get("device_clock") for rank, meta in sorted(loaded.meta.items())}


# (a) Device time against the profiler ------------------------------------------------------
CALLS = 30
#: About 2.6 ms of one-rank reduce kernel at H100 memory bandwidth. The device is idle
#: when each call is issued, so the traced span also holds the host's enqueue of the
#: kernel (tens of µs): a kernel this long keeps that under 2 %.
NCCL_BYTES = 4 << 30
GLOO_BYTES = 16 << 20
GLOO_RANKS = 4
WHAT_RAN = {
    "nccl": "1 rank on NCCL, ReduceOp.AVG (one NCCL rank runs no kernel for an in-place "
    "sum; an average runs its one-rank reduce kernel): device work = that kernel",
    "gloo": "{world} processes on the one GPU, gloo on CUDA tensors (NCCL refuses two "
    "ranks on one GPU): device work = gloo's copy to pinned host memory, the host "
    "all-reduce, and the copy back, from the first copy's start to the last one's end",
}


def devtime_run(ctx: Context, backend: str, world: int, nbytes: int) -> dict[str, Any]:
    """One traced and profiled job of :func:`_gpu_check_worker.devtime`, and each
    rank's calls compared with the profiler's (the measured calls are steps 1..CALLS)."""
    import polars as pl

    label = f"devtime-{backend}-{world}"
    trace, profiles = ctx.work / f"{label}-trace", ctx.work / f"{label}-profile"
    spec = {
        "backend": backend,
        "trace": str(trace),
        "settings": TRACED,
        "numel": nbytes // 4,
        "calls": CALLS,
        "gap_s": 0.002,
        "profile": str(profiles / "rank-{rank}.json"),
    }
    facts = ctx.launch("devtime", spec, world, label=label, limit_s=60)
    loaded = _load(trace)
    ranks = {}
    for rank in range(world):
        rows = loaded.events.filter(
            (pl.col("rank") == rank) & (pl.col("op") == "all_reduce") & (pl.col("step") >= 1)
        ).sort("seq")
        spans = [
            x - e if e >= 0 and x >= 0 else -1
            for e, x in zip(rows["device_enter_ns"], rows["device_exit_ns"], strict=True)
        ]
        profile = _read_json(profiles / f"rank-{rank}.json") or {}
        ranks[str(rank)] = compare_spans(
            spans, call_windows(profile.get("traceEvents", []), MARKER)
        )
    return {
        "what_ran": WHAT_RAN[backend].format(world=world),
        "bytes": nbytes,
        "op": facts[0]["op"],
        "ranks": ranks,
        "device_clock": _device_clocks(loaded),
    }


def part_a(ctx: Context) -> None:
    for backend, world, nbytes in (("nccl", 1, NCCL_BYTES), ("gloo", GLOO_RANKS, GLOO_BYTES)):
        key = f"{backend}_{world}_rank{'s' if world > 1 else ''}"
        result = attempt(devtime_run, ctx, backend, world, nbytes)
        ctx.part["figures"][key] = result
        ranks = result.get("ranks") or {}
        ctx.part["checks"][f"{key}_device_times"] = bool(ranks) and all(
            r["calls_traced"] == r["calls_with_device_times"] == CALLS for r in ranks.values()
        )
        ctx.part["checks"][f"{key}_within_5pct"] = bool(ranks) and all(
            r["within_5pct"] for r in ranks.values()
        )
        for rank, r in ranks.items():
            ctx.part["summary"].append(
                f"{key} rank {rank}: traced/profiler median {r['median_ratio']}, p90 "
                f"{r['p90_ratio']} ({r['matched']} calls); {r['median_span_us']} us vs "
                f"{r['median_profiler_us']} us, excess {r['median_excess_us']} us"
            )
            if not r["calls_with_device_work"]:  # CUPTI unavailable to the profiler?
                ctx.part["summary"].append(f"{key} rank {rank}: the profiler saw no device work")
            if not r["calls_with_device_times"]:
                ctx.part["summary"].append(f"{key} rank {rank}: the trace has no device times")
        if "error" in result:
            ctx.part["summary"].append(f"{key}: {result['error']}")
        ctx.save()


# (b) A CPU-bound and a GPU-bound rank ------------------------------------------------------
BOUND = {
    "backend": "gloo",
    "gpu_rank": 1,
    "sleep_ms": 15.0,
    "gpu_ms": 40.0,
    "matmul_n": 8192,
    "numel": 1 << 20,
    "warmup": 3,
    "steps": 30,
}


def part_b(ctx: Context) -> None:
    import polars as pl

    trace = ctx.work / "bound-trace"
    facts = ctx.launch(
        "bound", dict(BOUND, trace=str(trace), settings=TRACED), 2, label="bound", limit_s=60
    )
    loaded = _load(trace)
    first = BOUND["warmup"] + 1  # step 0: set-up; then the warm-up steps
    rows = (
        loaded.events.filter((pl.col("op") == "all_reduce") & (pl.col("step") >= first))
        .select("rank", "group", "seq", "enter_ns", "device_enter_ns")
        .to_dicts()
    )
    ahead = run_ahead_ms(rows)
    by_host, by_device = last_arrivals(rows, "enter_ns"), last_arrivals(rows, "device_enter_ns")
    gpu_rank = BOUND["gpu_rank"]
    cpu_rank = 1 - gpu_rank
    gpu_ms = next(f["gpu_ms"] for f in facts if f["rank"] == gpu_rank)
    fig = ctx.part["figures"]
    fig.update(
        what_ran="2 processes on the one GPU, gloo on CUDA tensors",
        ranks={str(f["rank"]): f for f in facts},
        run_ahead_ms={str(k): v for k, v in ahead.items()},
        last_by_host={str(k): v for k, v in by_host.items()},
        last_by_device={str(k): v for k, v in by_device.items()},
        device_clock=_device_clocks(loaded),
    )
    gpu_ahead, cpu_ahead = ahead.get(gpu_rank), ahead.get(cpu_rank)
    ctx.part["checks"].update(
        gpu_bound_rank_runs_ahead=gpu_ahead is not None and gpu_ahead >= 0.5 * gpu_ms,
        cpu_bound_rank_does_not=cpu_ahead is not None and cpu_ahead <= min(2.0, 0.25 * gpu_ms),
        host_says_cpu_bound_rank_last=mostly(by_host) == cpu_rank,
        device_says_gpu_bound_rank_last=mostly(by_device) == gpu_rank,
    )
    ctx.part["summary"] += [
        f"run-ahead: cpu-bound rank {cpu_rank} {cpu_ahead} ms, gpu-bound rank {gpu_rank} "
        f"{gpu_ahead} ms ({gpu_ms:.1f} ms of matrix products queued per step)",
        f"last to arrive: by host {by_host} (ranks: calls), by device {by_device}",
    ]
    ctx.save()
    fig["diagnose"] = diagnose(ctx, trace, first)
    findings = fig["diagnose"].get("findings")
    ctx.part["summary"] += [f"diagnose: {line}" for line in finding_lines(findings)]
    ctx.save()


def diagnose(ctx: Context, trace: Path, warmup_steps: int) -> dict[str, Any]:
    """``syncpace diagnose TRACE --json``: its findings as it gives them."""
    command = [sys.executable, "-m", "syncpace", "diagnose", str(trace), "--json"]
    command += ["--warmup-steps", str(warmup_steps)]
    try:
        proc = subprocess.run(
            command, env=child_env(), capture_output=True, text=True, timeout=ctx.timeout(60)
        )
    except (subprocess.TimeoutExpired, WorkerError) as exc:
        return {"error": f"diagnose did not finish: {exc}"}
    if proc.returncode != 0:
        return {"error": f"diagnose exited {proc.returncode}", "stderr": proc.stderr[-3000:]}
    try:
        output = json.loads(proc.stdout)
    except ValueError as exc:
        return {"error": f"diagnose printed no JSON: {exc}", "stdout": proc.stdout[-3000:]}
    findings = output.get("findings") if isinstance(output, dict) else None
    return {"findings": findings, "count": len(findings) if isinstance(findings, list) else None}


# (c) Pacing on the device --------------------------------------------------------------------
CALIBRATE_STEP = 4
DELAYED_STEPS = (10, 15, 20, 25)
DELAY_S = 0.02
PACING = {
    "backend": "nccl",
    "steps": 30,
    "calibrate_step": CALIBRATE_STEP,
    # The first delay placed on a device starts the spin kernel's calibration and is
    # slept on the host: a microsecond, given where the device is idle.
    "delays_s": {str(CALIBRATE_STEP): 1e-6, **{str(s): DELAY_S for s in DELAYED_STEPS}},
    "gpu_ms": 2.0,
    "matmul_n": 4096,
    "numel": 1 << 18,
}


def part_c(ctx: Context) -> None:
    import polars as pl

    trace = ctx.work / "pacing-trace"
    facts = ctx.launch(
        "pacing", dict(PACING, trace=str(trace), settings=TRACED), label="pacing", limit_s=45
    )[0]
    loaded = _load(trace)
    calls = (
        loaded.events.filter(pl.col("op") == "all_reduce")
        .sort("seq")
        .group_by("step", maintain_order=True)
        .first()
        .to_dicts()
    )
    steps = loaded.steps.sort("step").to_dicts()
    figures = pacing_figures(calls, steps, CALIBRATE_STEP + 2)
    calibration = next((s for s in steps if s["step"] == CALIBRATE_STEP), {})
    figures.update(
        calibration_step={
            "step": CALIBRATE_STEP,
            "pacing_delay_ns": calibration.get("pacing_delay_ns"),
            "device_delay_ns": calibration.get("device_delay_ns"),
        },
        worker=facts,
        device_clock=_device_clocks(loaded),
    )
    ctx.part["figures"] = figures
    ctx.part["checks"] = pacing_checks(figures)
    ctx.part["summary"] = [
        f"device arrival shifted {figures['shift_ms']} ms by delays of {figures['delay_ms']} ms "
        f"(steps {list(DELAYED_STEPS)}); on the device {figures['on_device']} of "
        f"{len(figures['delayed_steps'])}, slept on the host {figures['host_slept']}; "
        f"spin calibration {facts.get('cycles_per_ns')} cycles/ns"
    ]
    ctx.save()


# (d) compile + DDP, FSDP2, a 1-D mesh ---------------------------------------------------------
WORKLOAD_STEPS = 6
#: The Flight Recorder's ring (both names torch has used), and cuBLAS made deterministic.
WORKLOAD_ENV = {
    "TORCH_FR_BUFFER_SIZE": "20000",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "20000",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}
WORKLOADS = (("compile_ddp", 200.0), ("fsdp2", 60.0), ("mesh", 60.0))


def workload_pair(ctx: Context, name: str, limit_s: float) -> dict[str, Any]:
    """The workload traced and untraced, side by side on the one GPU, then compared."""
    trace = ctx.work / f"{name}-trace"
    base = {"backend": "nccl", "workload": name, "steps": WORKLOAD_STEPS}
    timeout = ctx.timeout(limit_s)
    jobs = [
        ctx.start(
            "workload",
            dict(base, trace=str(trace), settings={"flush_interval_s": 0.2}),
            label=f"{name}-traced",
            env=WORKLOAD_ENV,
        ),
        ctx.start("workload", base, label=f"{name}-untraced", env=WORKLOAD_ENV),
    ]
    deadline = time.monotonic() + timeout
    try:
        traced, untraced = (job.wait(deadline - time.monotonic())[0] for job in jobs)
    finally:
        for job in jobs:
            job.kill()
    for result in (traced, untraced):
        fr = result.get("fr") or {}
        if "names" in fr:
            fr["counts"] = count_ops(fr_op(n) for n in fr.pop("names"))
    loaded = _load(trace)
    trace_ops = count_ops(loaded.events.filter(loaded.events["rank"] == 0)["op"].to_list())
    return compare_workload(traced, untraced, trace_ops)


def part_d(ctx: Context) -> None:
    for name, limit_s in WORKLOADS:
        result = attempt(workload_pair, ctx, name, limit_s)
        ctx.part["figures"][name] = result
        checks = result.get("checks") or {"ran": False}
        ctx.part["checks"].update({f"{name}_{k}": v for k, v in checks.items()})
        if "error" in result:
            ctx.part["summary"].append(f"{name}: {result['error']}")
        else:
            ctx.part["summary"].append(
                f"{name}: trace {result['trace_counts']}, Flight Recorder "
                f"{result['fr_counts_traced']} ({result['fr_source']}); losses "
                f"{'identical' if checks['losses_identical'] else 'DIFFER'} over "
                f"{len(result['losses_traced'])} steps"
                + (f" ({result['note']})" if result.get("note") else "")
            )
        ctx.save()


# (e) Overhead -------------------------------------------------------------------------------
OVERHEAD = {
    "backend": "nccl",
    "layers": 16,
    "d_model": 1024,
    "heads": 16,
    "batch": 8,
    "seq": 512,
    # Weights of 2-8 MB each get a bucket of their own: about 4 buckets per layer.
    "bucket_cap_mb": 1.0,
    "warmup": 5,
    "steps": 40,
}
PAIRS = 3
MIN_BUCKETS = 50


def overhead_run(ctx: Context, label: str, traced: bool) -> dict[str, Any]:
    """One run of the overhead job; a traced one with its all-reduces per step."""
    import polars as pl

    spec = dict(OVERHEAD)
    if traced:
        spec["trace"] = str(ctx.work / f"{label}-trace")  # the tracer's default settings
    result = ctx.launch("overhead", spec, label=label, limit_s=60)[0]
    if traced:
        events = _load(Path(spec["trace"])).events
        steps = events.filter(pl.col("op") == "all_reduce")["step"].to_list()
        result["all_reduces_per_step"] = per_step_counts(steps, OVERHEAD["warmup"])
    return result


def part_e(ctx: Context) -> None:
    runs: list[dict[str, Any]] = []
    errors = ctx.part.setdefault("errors", [])
    for pair in range(PAIRS):
        for traced in (False, True):  # A B A B A B: drift on the machine hits both
            label = f"overhead-{'traced' if traced else 'untraced'}-{pair}"
            result = attempt(overhead_run, ctx, label, traced)
            if "error" in result:
                errors.append(result)
                continue
            runs.append(result)
            counts = [r["all_reduces_per_step"] for r in runs if "all_reduces_per_step" in r]
            ctx.part["figures"] = overhead_figures(runs, median(counts) if counts else 0.0)
            ctx.save()
    figures = ctx.part["figures"]
    ctx.part["checks"] = {
        "every_run_finished": len(runs) == 2 * PAIRS,
        "at_least_50_buckets": (figures.get("collectives_per_step") or 0) >= MIN_BUCKETS,
        "ratio_at_least_0.99": (figures.get("ratio") or 0) >= 0.99,
    }
    ctx.part["summary"] = [
        f"step {figures.get('step_ms_untraced')} ms untraced, {figures.get('step_ms_traced')} ms "
        f"traced: ratio {figures.get('ratio')} (pairs {figures.get('pair_ratios')}); "
        f"{figures.get('collectives_per_step')} all-reduces per step, "
        f"host CPU added per collective {figures.get('cpu_us_per_collective')} us"
    ]
    ctx.save()


# The check -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Part:
    title: str
    limit_s: float
    run: Callable[[Context], None]


PARTS = {
    "a": Part("device time against the profiler's kernels", 100.0, part_a),
    "b": Part("CPU-bound and GPU-bound ranks told apart", 75.0, part_b),
    "c": Part("pacing delay placed on the device", 50.0, part_c),
    "d": Part("compile+DDP, FSDP2, 1-D mesh: counts and losses", 200.0, part_d),
    "e": Part("overhead on a bf16 transformer DDP step", 130.0, part_e),
}
#: The order parts run in: the quick ones on device timing first, compilation last.
ORDER = "acbed"


def no_cuda_reason() -> str | None:
    """Why this machine cannot run the check, or None when it has a CUDA device."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a broken driver warns: the one line says it
        try:
            import torch
        except ImportError:
            return "torch is not installed"
        try:
            if torch.cuda.is_available():
                return None
        except Exception as exc:
            return f"CUDA does not initialise: {exc}"
    return f"torch {torch.__version__} sees no CUDA device"


def run_part(name: str, work: Path, limit_s: float, out: Path) -> int:
    """The body of a part's process: run it, saving as it goes; its failure is
    recorded, not raised (the check goes on with the next part)."""
    part = PARTS[name]
    ctx = Context(work, time.monotonic() + limit_s, out)
    ctx.part.update(title=part.title, status="running")
    ctx.save()
    started = time.monotonic()
    try:
        part.run(ctx)
        ctx.part["status"] = "ok"
    except Exception as exc:
        ctx.part["status"] = "failed"
        ctx.part["error"] = f"{type(exc).__name__}: {exc}"
        ctx.part["traceback"] = traceback.format_exc(limit=12)
        if isinstance(exc, WorkerError):
            ctx.part["logs"] = exc.logs
    ctx.part["elapsed_s"] = round(time.monotonic() - started, 1)
    ctx.save()
    return 0


def run_part_process(name: str, work: Path, deadline: float) -> dict[str, Any]:
    """Part ``name`` in a process of its own session, killed with all its ranks when it
    runs past its limit; what it saved is kept either way."""
    part = PARTS[name]
    limit = min(part.limit_s, deadline - time.monotonic() - GRACE_S)
    if limit < MIN_PART_S:
        return {"title": part.title, "status": "skipped", "error": "the budget is spent"}
    out, log = work / f"part-{name}.json", work / f"part-{name}.log"
    command = [sys.executable, str(Path(__file__).resolve()), "--run-part", name]
    command += ["--work", str(work / name), "--limit-s", f"{limit:.1f}", "--part-out", str(out)]
    started = time.monotonic()
    timed_out = False
    with open(log, "w") as output:
        proc = subprocess.Popen(
            command, env=child_env(), stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            proc.wait(timeout=limit + GRACE_S)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:  # the check itself is stopped: so are the part's ranks
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        if timed_out:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    result = _read_json(out) or {"figures": {}, "checks": {}, "summary": []}
    result.setdefault("title", part.title)
    if timed_out:
        result.update(status="timeout", error=f"killed after {limit + GRACE_S:.0f} s")
    elif result.get("status") not in ("ok", "failed"):
        result.update(status="failed", error=f"exited {proc.returncode}: {_tail(log, 1500)}")
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    return result


def machine(work: Path) -> dict[str, Any]:
    """The GPU, driver, CUDA, NCCL and torch versions (read in a process of its own)."""
    ctx = Context(work / "env", time.monotonic() + 40 + MARGIN_S)
    return attempt(lambda: ctx.launch("env", {}, label="env", limit_s=40)[0])


def check(out: Path, parts: str, keep: Path | None, budget_s: float) -> int:
    """Run ``parts`` within ``budget_s``; write the report to ``out`` after each part."""
    started = time.monotonic()
    deadline = started + budget_s
    # SIGTERM unwinds like Ctrl-C: the running part's process group is killed on the way
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out.parent.mkdir(parents=True, exist_ok=True)
    work = keep or Path(tempfile.mkdtemp(prefix="syncpace-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    environment = machine(work)
    results: dict[str, dict[str, Any]] = {}

    def write() -> dict[str, Any]:
        report = assemble(environment, results, time.monotonic() - started)
        report["budget_s"] = budget_s
        report["kept"] = str(keep) if keep else None
        _write_json(out, report)
        return report

    write()
    for name in (p for p in ORDER if p in parts):
        print(f"({name}) {PARTS[name].title} ...", flush=True)
        results[name] = run_part_process(name, work, deadline)
        write()
    report = write()
    for line in summary_lines(report):
        print(line)
    print(f"figures: {out}")
    if keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if report["all_held"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-check.json", help="the JSON report [%(default)s]")
    parser.add_argument("--parts", default="abcde", help="which parts to run [%(default)s]")
    parser.add_argument("--keep", metavar="DIR", help="keep traces, profiles and logs in DIR")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="[%(default)s]")
    parser.add_argument("--run-part", choices=sorted(PARTS), help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--limit-s", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--part-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_part:
        return run_part(args.run_part, Path(args.work), args.limit_s, Path(args.part_out))
    reason = no_cuda_reason()
    if reason is not None:
        print(f"gpu_check: no CUDA here ({reason}); the check needs one NVIDIA GPU")
        return 0
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; known: {''.join(sorted(PARTS))}")
    keep = Path(args.keep).resolve() if args.keep else None
    return check(Path(args.out), args.parts, keep, args.budget_s)


if __name__ == "__main__":
    sys.exit(main())
