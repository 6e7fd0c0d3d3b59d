"""The validation grid: real runs on the emulated fabric against the calibrated simulator.

For every point (2, 4, 8 ranks; star and 1:2 and 1:4 leaf-spine; with and without a
planted straggler, greedy TCP or fixed-rate UDP background flows, and delayed ACKs)
:func:`run_grid`

1. calibrates α and β once per rank count with ``syncpace bench all_reduce`` on a star
   of that many hosts (the non-blocking reference: β is the NIC rate),
2. brings up the point's fabric (unique name, always torn down) and runs the traced
   validation job (:mod:`.worker`) across it,
3. calibrates compute time, jitter, spread and slow ranks from the run's own trace
   (:mod:`.model`), simulates the same configuration, and
4. compares mean iteration time, CV, p99 and the median transfer time (:mod:`.compare`),
   writing ``validation.json`` and ``validation.html``. Needs root. See
   docs/validation.md.

Each point is simulated on its tier (``--tiers``; analytical by default), the packet
tier with the congestion control read back from the point's fabric.
:func:`resimulate_grid` simulates an earlier grid's measured points again on other
tiers (:mod:`.measured`), without root.
"""

from __future__ import annotations

import json
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from syncpace.bench.config import BenchConfig
from syncpace.bench.on_fabric import bench_on_fabric
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.errors import ConfigError
from syncpace.fabric import build_spec, bulk
from syncpace.fabric.backend import SystemBackend, require_root
from syncpace.fabric.lifecycle import down, up
from syncpace.fabric.runner import RunOptions, run_job
from syncpace.fabric.spec import parse_rate
from syncpace.ports import free_port
from syncpace.sim.calibrate import from_bench
from syncpace.trace.reader import load_trace
from syncpace.validate.compare import Comparison, Thresholds
from syncpace.validate.measured import (
    Measured,
    load_measured,
    setup_json,
    simulate_point,
    tiers_of,
)
from syncpace.validate.model import Fabric, Point, real_stats
from syncpace.validate.settings import GridSettings

WORKER = "syncpace.validate.worker"
WARMUP = 5
STARTED = "validate worker: started"
# The job's collectives follow ~150 ms of idle compute: the benchmark idles as long
# before each call, so its links start every call rested as the job's do.
BENCH = BenchConfig(
    ops="all_reduce",
    min_bytes="64K",
    max_bytes="1M",
    step_factor=2,
    iters=6,
    warmup=2,
    gap_ms=150,
    pairs=False,
    check=False,
    timeout_s=240,
)
FLOW_PORT = 5401
# Background flows beside the job. On the star from h1 into h0: they share h1's and
# h0's host links with the ring (1->2 and 3->0). On the leaf-spine from leaf1 across
# the spine: greedy h3->h0 and h3->h1 as the demo does (the ring's 3->0 meets both on
# h3's link and leaf1's uplink); UDP h2->h0 and h3->h1 (leaf1's uplink keeps 40 %).
INTO_H0 = (("h1", "h0"),)
FROM_H3 = (("h3", "h0"), ("h3", "h1"))
ACROSS = (("h2", "h0"), ("h3", "h1"))

TCP_FIFO = "TCP sharing a FIFO with greedy flows: no queues, loss or congestion control"
BUFFERING = "buffering: the job's bursts run ahead of fixed-rate traffic queued behind them"
DELAYED_ACK = (
    "TCP delayed ACKs stall ring steps sent to ranks still computing (bbr): the model has no "
    "transport"
)

GRID = [
    Point(name="star2", topology="star", ranks=2),
    Point(name="star2-straggler", topology="star", ranks=2, slow_ms=60),
    Point(name="star4", topology="star", ranks=4),
    Point(name="star4-straggler", topology="star", ranks=4, slow_ms=60),
    Point(name="star4-contended", topology="star", ranks=4, flows=INTO_H0, gap=TCP_FIFO),
    Point(name="star4-udp", topology="star", ranks=4, flows=INTO_H0, flow_share=0.5),
    Point(name="ls4", topology="leafspine", ranks=4, oversub=2),
    Point(name="ls4-straggler", topology="leafspine", ranks=4, oversub=2, slow_ms=60),
    Point(name="ls4-oversub4", topology="leafspine", ranks=4, oversub=4),
    Point(
        name="ls4-contended", topology="leafspine", ranks=4, oversub=2, flows=FROM_H3, gap=TCP_FIFO
    ),
    Point(
        name="ls4-udp",
        topology="leafspine",
        ranks=4,
        oversub=2,
        flows=ACROSS,
        flow_share=0.3,
        gap=BUFFERING,
    ),
    Point(name="star8", topology="star", ranks=8, compute_ms=200, buckets=1),
    Point(
        name="star8-delayed-ack",
        topology="star",
        ranks=8,
        compute_ms=200,
        buckets=1,
        quickack=False,
        gap=DELAYED_ACK,
    ),
]


def fabric_spec(point: Point, rate: str, congestion_control: str = "") -> Any:
    name = "va" + secrets.token_hex(3)
    if point.topology == "star":
        values = {"topology": "star", "hosts": point.ranks, "host_rate": rate}
    else:
        values = {
            "topology": "leaf-spine",
            "leaves": 2,
            "hosts": point.ranks // 2,
            "host_rate": rate,
            "oversubscription": point.oversub,
        }
    values["congestion_control"] = congestion_control
    return build_spec({**values, "name": name, "quickack": point.quickack})


def worker_args(point: Point, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        WORKER,
        "--steps",
        str(steps),
        "--compute-ms",
        f"{point.compute_ms:g}",
        "--jitter",
        f"{point.jitter:g}",
        "--slow-rank",
        str(point.slow_rank),
        "--slow-ms",
        f"{point.slow_ms:g}",
        "--buckets",
        str(point.buckets),
        "--bucket-bytes",
        str(point.bucket_bytes),
    ]


class Sink:
    """The hosts' output into the log; ``on_start`` once rank 0 says it trains (greedy
    flows started before gloo connects can make its connection setup fail)."""

    def __init__(self, log: Any, on_start: Any = None) -> None:
        self.log, self.on_start, self.thread = log, on_start, None

    def write(self, text: str) -> int:
        self.log.write(text)
        if self.on_start is not None and self.thread is None and STARTED in text:
            self.thread = threading.Thread(target=self.on_start, daemon=True)
            self.thread.start()
        return len(text)

    def flush(self) -> None:
        self.log.flush()


def complete(run_dir: Path, ranks: int, steps: int) -> bool:
    """Every rank traced every step (an abort at teardown leaves the data whole)."""

    try:
        done = load_trace(run_dir).steps.group_by("rank").len()
    except Exception:
        return False
    return done.height == ranks and int(done["len"].min()) >= steps


def run_point(
    point: Point, args: GridSettings, out: Path, log: Any, notes: list[str]
) -> tuple[Path, Fabric]:
    """The traced job on a fresh fabric, background flows from its first step on; its
    run directory and the fabric as the simulator needs it (what its hosts ran)."""

    rate, steps = args.rate, args.steps
    backend = SystemBackend()
    spec = fabric_spec(point, rate, args.congestion_control)
    state = up(spec, backend)
    fabric = Fabric(
        rate_bps=parse_rate(rate),
        congestion_control=state.fabric.congestion_control,
        queue_ms=spec.queue_ms,
    )
    run_dir = out / point.name
    flows: list[bulk.Flow] = []
    try:
        timeout = 60 + steps * (point.compute_ms + point.slow_ms + 600) / 1e3
        errors: list[str] = []

        def start_flows() -> None:
            try:
                rate_bps = int(point.flow_share * parse_rate(rate)) or None
                pairs = list(point.flows)
                flows.extend(bulk.start_flows(state.fabric, pairs, timeout, FLOW_PORT, rate_bps))
            except Exception as exc:  # the point is then reported as failed
                errors.append(str(exc))

        sink = Sink(log, start_flows if point.flows else None)
        env = traced_env(run_dir, TraceConfig(dir=str(run_dir)))
        options = RunOptions(timeout_s=timeout, grace_s=5.0, master_port=free_port())
        result = run_job(state, worker_args(point, steps), run_dir, backend, options, env, sink)
        if sink.thread is not None:
            sink.thread.join(timeout=15)
        if errors:
            raise RuntimeError(f"{point.name}: background flows failed: {errors[0]}")
        if result is None or result.returncode != 0:
            reason = "no result" if result is None else result.reason
            if not complete(run_dir, point.ranks, steps):
                raise RuntimeError(f"{point.name}: the job ended: {reason} (logs in {run_dir})")
            notes.append(f"every step traced, but a host failed at teardown: {reason}")
    finally:
        for flow in flows:
            flow.stop()
        down(state, backend)
    return run_dir, fabric


def bench_for(ranks: int, args: GridSettings, out: Path, log: Any) -> Path:
    backend = SystemBackend()
    bench = Point(name="bench", topology="star", ranks=ranks)
    state = up(fabric_spec(bench, args.rate, args.congestion_control), backend)
    run_dir = out / f"bench-{ranks}"
    try:
        bench_on_fabric(state, BENCH, run_dir, echo=log)
    finally:
        down(state, backend)
    return run_dir


def verdict(
    rows: list[Comparison], points: dict[str, Point], failed_runs: int
) -> tuple[int, list[str]]:
    """Exit code and summary lines: 0 when every point outside the known gaps meets the
    thresholds and every run ran; known gaps that fail are named with their mechanism,
    and one that passes is pointed out (the model, or the fabric, changed)."""
    must = [c for c in rows if not points[c.point].gap]
    gaps = [c for c in rows if points[c.point].gap]
    lines = [f"{sum(c.passed for c in must)}/{len(must)} points within the thresholds"]
    for c in gaps:
        state = "fails, as known" if not c.passed else "passes: the known gap did not show"
        lines.append(f"known gap, {c.point}: {state} ({points[c.point].gap})")
    ok = all(c.passed for c in must) and failed_runs == 0
    return (0 if ok else 1), lines


def table(rows: list[Comparison], limits: Thresholds, gaps: frozenset[str] = frozenset()) -> Table:
    t = Table(
        title=f"simulator vs emulated fabric (mean ±{limits.mean_rel:.0%}, CV ±{limits.cv_abs:.2f})"
    )
    for col in (
        "point",
        "tier",
        "iter ms real",
        "sim",
        "err",
        "CV real",
        "sim",
        "err",
        "p99 ms real",
        "sim",
        "err",
        "xfer ms real",
        "sim",
        "err",
        "pass",
    ):
        t.add_column(col, justify="right")
    for c in rows:
        r, s = c.real, c.sim
        t.add_row(
            c.point,
            c.tier,
            f"{r.iteration_ms:.1f}",
            f"{s.iteration_ms:.1f}",
            f"{c.mean_err:+.1%}",
            f"{r.cv:.3f}",
            f"{s.cv:.3f}",
            f"{c.cv_err:+.3f}",
            f"{r.p99_ms:.1f}",
            f"{s.p99_ms:.1f}",
            f"{c.p99_err:+.1%}",
            f"{r.transfer_ms:.1f}",
            f"{s.transfer_ms:.1f}",
            f"{c.transfer_err:+.1%}",
            "[green]yes[/]" if c.passed else "gap" if c.point in gaps else "[red]no[/]",
        )
    return t


def plot(rows: list[Comparison], path: Path) -> None:
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1, cols=3, subplot_titles=("mean iteration ms", "CV", "median transfer ms")
    )
    names = [c.point for c in rows]
    columns = (
        lambda stats: stats.iteration_ms,
        lambda stats: stats.cv,
        lambda stats: stats.transfer_ms,
    )
    for label, pick in (("real", lambda c: c.real), ("simulated", lambda c: c.sim)):
        for col, value in enumerate(columns, start=1):
            fig.add_bar(
                x=names,
                y=[value(pick(c)) for c in rows],
                name=label,
                row=1,
                col=col,
                legendgroup=label,
                showlegend=col == 1,
            )
    fig.update_layout(title="syncpace validation: emulated fabric vs simulator", barmode="group")
    fig.write_html(path, include_plotlyjs=True, full_html=True)


def select(names: str) -> list[Point]:
    """The grid's points named in a comma list (all when empty)."""
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = wanted - {pt.name for pt in GRID}
    if unknown:
        known = ", ".join(pt.name for pt in GRID)
        raise ConfigError(f"unknown points {sorted(unknown)} (known: {known})")
    return [pt for pt in GRID if not wanted or pt.name in wanted]


def run_grid(args: GridSettings, console: Console) -> int:
    """Run the grid ``args`` describes; 0 when every point outside the known gaps meets
    the thresholds (:func:`verdict`). With ``args.resimulate``, :func:`resimulate_grid`."""
    if args.resimulate:
        return resimulate_grid(args, console)
    grid = select(args.points)
    tiers = tiers_of(args.tiers, grid)
    require_root("the validation grid")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    limits = Thresholds()
    known_gaps = frozenset(pt.name for pt in grid if pt.gap)
    rows: list[Comparison] = []
    extra: dict[str, Any] = {}
    benches: dict[int, Path] = {}
    failures: dict[str, str] = {}
    began = time.monotonic()
    with Progress(console=console) as progress, open(out / "fabric.log", "w") as log:
        task = progress.add_task("validation", total=len(grid))
        for point in grid:
            if point.ranks not in benches:
                progress.update(task, description=f"bench, {point.ranks} ranks")
                benches[point.ranks] = bench_for(point.ranks, args, out, log)
            cal = from_bench(benches[point.ranks])
            progress.update(task, description=f"{point.name}: real run")
            try:
                notes: list[str] = []
                run_dir, fabric = run_point(point, args, out, log, notes)
            except Exception as exc:  # reported, and the grid goes on
                failures[point.name] = str(exc)
                progress.console.print(f"[red]{point.name}: {exc}[/]")
                progress.advance(task)
                continue
            real, profile = real_stats(run_dir, WARMUP)
            m = Measured(point=point, real=real, bench=cal, profile=profile, fabric=fabric)
            progress.update(task, description=f"{point.name}: simulation, {tiers[point.name]}")
            c, cfg = simulate_point(m, tiers[point.name], args.sim_steps, args.seed, limits)
            rows.append(c)
            extra[point.name] = {**setup_json(m, cfg), "notes": notes}
            progress.console.print(table([c], limits, known_gaps))
            progress.advance(task)
    wall = time.monotonic() - began
    console.print(table(rows, limits, known_gaps))
    ran = sorted({e["fabric"]["congestion_control"] for e in extra.values()})
    report = {
        "rate": args.rate,
        "steps": args.steps,
        "sim_steps": args.sim_steps,
        "warmup": WARMUP,
        "congestion_control": ran,
        "thresholds": limits.__dict__,
        "wall_s": wall,
        "rows": [{**c.to_json(), "setup": extra[c.point]} for c in rows],
        "failed_runs": failures,
    }
    (out / "validation.json").write_text(json.dumps(report, indent=1, default=str))
    plot(rows, out / "validation.html")
    code, lines = verdict(rows, {pt.name: pt for pt in grid}, len(failures))
    for line in lines:
        console.print(line, markup=False)
    console.print(f"the hosts ran {', '.join(ran) or 'nothing'} (read back from each fabric)")
    console.print(f"{wall:.0f} s; {out / 'validation.json'}, {out / 'validation.html'}")
    for name, why in failures.items():
        console.print(f"[red]not run: {name}: {why}[/]")
    return code


def resimulate_grid(args: GridSettings, console: Console) -> int:
    """An earlier grid's measured points simulated again on ``args.tiers`` (no root, no
    real run); the table, ``resimulated.json`` in ``args.out``, and :func:`verdict`."""
    wanted = {pt.name for pt in select(args.points)}
    every = load_measured(args.resimulate, {pt.name: pt for pt in GRID})
    measured = [m for m in every if m.point.name in wanted]
    if not measured:
        raise ConfigError(f"{args.resimulate}: none of the points asked for was measured")
    tiers = tiers_of(args.tiers, [m.point for m in measured])
    limits = Thresholds()
    known_gaps = frozenset(m.point.name for m in measured if m.point.gap)
    rows: list[Comparison] = []
    extra: dict[str, Any] = {}
    began = time.monotonic()
    for m in measured:
        tier = tiers[m.point.name]
        took = time.monotonic()
        c, cfg = simulate_point(m, tier, args.sim_steps, args.seed, limits)
        rows.append(c)
        extra[c.point] = {**setup_json(m, cfg), "sim_wall_s": time.monotonic() - took}
        console.print(table([c], limits, known_gaps))
    console.print(table(rows, limits, known_gaps))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "resimulated": str(args.resimulate),
        "sim_steps": args.sim_steps,
        "seed": args.seed,
        "thresholds": limits.__dict__,
        "wall_s": time.monotonic() - began,
        "rows": [{**c.to_json(), "setup": extra[c.point]} for c in rows],
    }
    (out / "resimulated.json").write_text(json.dumps(report, indent=1, default=str))
    code, lines = verdict(rows, {m.point.name: m.point for m in measured}, 0)
    for line in lines:
        console.print(line, markup=False)
    console.print(f"{report['wall_s']:.0f} s; {out / 'resimulated.json'}")
    return code
