"""Always-on mode for a long run: disk use against its bound, and the throughput cost.

A 4-rank gloo DDP job (one bucket per layer, a sleep for compute) runs for
``--minutes`` in always-on mode (``--continuous``: rotating segments within
``--budget-mb`` per rank, per-step summaries, the live monitor), between two untraced
runs of ``--untraced-minutes`` each. While it runs, the events files of every rank are
measured every second. Printed: the largest disk use a rank's events reached against
the bound, what rotation removed, that the summaries cover every step, and the traced
step rate over the mean of the untraced ones before and after (which cancels a slow
drift of the machine). A plot of disk use over time goes to ``--out``.

    python benchmarks/always_on.py                       # 10 minutes traced
    python benchmarks/always_on.py --minutes 1 --untraced-minutes 0.5   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import plotly.graph_objects as go
from _ranks import spawn_ranks
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.telemetry import TelemetryConfig
from syncpace.trace import load_trace, schema

WORKER = Path(__file__).with_name("_always_on_worker.py")


def launch(world: int, seconds: float, trace_dir: Path | None, config: TraceConfig) -> list:
    base = dict(os.environ)
    if trace_dir is not None:
        base = traced_env(trace_dir, config, base, TelemetryConfig(host_sampler="off"))
    return spawn_ranks(world, [str(WORKER), str(seconds)], base)


def finish(procs: list, timeout: float) -> list[float]:
    outputs = [p.communicate(timeout=timeout) for p in procs]
    for p, (_out, err) in zip(procs, outputs, strict=True):
        if p.returncode != 0:  # (runs in a thread: say it here, the caller stops)
            print(f"benchmark rank failed ({p.returncode}):\n{err[-2000:]}", file=sys.stderr)
            return []
    return json.loads(outputs[0][0].strip().splitlines()[-1])


def events_bytes(run_dir: Path, world: int) -> list[int]:
    sizes = []
    for rank in range(world):
        stem = schema.rank_stem(rank)
        total = 0
        for path in list(run_dir.glob(f"{stem}.events*.arrow")):
            try:
                total += path.stat().st_size
            except FileNotFoundError:  # rotated out between listing and stat
                pass
        sizes.append(total)
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="traced run length")
    parser.add_argument("--untraced-minutes", type=float, default=2.0, help="each untraced run")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--budget-mb", type=float, default=4.0, help="per rank, MiB")
    parser.add_argument("--segment-s", type=float, default=15.0)
    parser.add_argument("--keep-s", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path("always_on_disk.html"))
    args = parser.parse_args()
    console = Console()
    config = TraceConfig(
        continuous=True,
        segment_s=args.segment_s,
        keep_s=args.keep_s,
        disk_budget_mb=args.budget_mb,
    )
    bound = int(args.budget_mb * 2**20)
    rates: dict[str, float] = {}
    samples: list[tuple[float, list[int]]] = []
    with tempfile.TemporaryDirectory() as tmp, Progress(console=console) as progress:
        run_dir = Path(tmp) / "run"
        plan = [
            ("untraced before", args.untraced_minutes, None),
            ("always-on", args.minutes, run_dir),
            ("untraced after", args.untraced_minutes, None),
        ]
        for name, minutes, trace_dir in plan:
            seconds = minutes * 60
            task = progress.add_task(name, total=seconds)
            procs = launch(args.ranks, seconds, trace_dir, config)
            start = time.monotonic()
            result: list[list[float]] = []
            waiter = threading.Thread(
                target=lambda p=procs, s=seconds, r=result: r.append(finish(p, s + 300)),
                daemon=True,
            )
            waiter.start()
            while waiter.is_alive():
                waiter.join(1.0)
                elapsed = time.monotonic() - start
                progress.update(task, completed=min(elapsed, seconds))
                if trace_dir is not None and trace_dir.exists():
                    samples.append((elapsed, events_bytes(trace_dir, args.ranks)))
            progress.update(task, completed=seconds)
            if not result or not result[0]:
                raise SystemExit(f"the {name} run failed")
            times = result[0][10:]  # the first steps build buckets and warm up
            rates[name] = 1 / statistics.median(times)
        trace = load_trace(run_dir)
        steps_per_rank = trace.meta[0]["steps_written"]
        summary_steps = trace.summaries.filter(trace.summaries["rank"] == 0).height
        seg = [trace.meta[r]["segments"] for r in range(args.ranks)]
        final = events_bytes(run_dir, args.ranks)
    peak = max(max(s) for _, s in samples)
    untraced = (rates["untraced before"] + rates["untraced after"]) / 2
    ratio = rates["always-on"] / untraced
    table = Table(title=f"always-on, {args.ranks} ranks, {args.minutes:g} min traced")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("disk bound per rank (events)", f"{bound / 2**20:.2f} MiB")
    table.add_row("largest a rank's events reached", f"{peak / 2**20:.2f} MiB")
    table.add_row("at the end, per rank", ", ".join(f"{b / 2**20:.2f}" for b in final) + " MiB")
    table.add_row(
        "segments written / rotated out (rank 0)", f"{seg[0]['written']} / {seg[0]['removed']}"
    )
    table.add_row("events rotated out (rank 0)", f"{seg[0]['removed_events']:,}")
    table.add_row(
        "steps / steps summarised, the tail after the last included (rank 0)",
        f"{steps_per_rank:,} / {summary_steps:,}",
    )
    for name, rate in rates.items():
        table.add_row(f"steps/s {name} (median)", f"{rate:.2f}")
    table.add_row("throughput ratio always-on / untraced", f"{ratio:.4f}")
    console.print(table)
    fig = go.Figure()
    for rank in range(args.ranks):
        fig.add_trace(
            go.Scatter(
                x=[t for t, _ in samples],
                y=[s[rank] / 2**20 for _, s in samples],
                name=f"rank {rank}",
            )
        )
    fig.add_hline(y=bound / 2**20, line_dash="dash", annotation_text="bound")
    fig.update_layout(
        title="events on disk per rank, always-on", xaxis_title="s", yaxis_title="MiB"
    )
    fig.write_html(args.out, include_plotlyjs="cdn")
    print(
        json.dumps(
            {
                "bound_bytes": bound,
                "peak_bytes": peak,
                "within_bound": peak <= bound,
                "segments_written": seg[0]["written"],
                "segments_removed": seg[0]["removed"],
                "steps": steps_per_rank,
                "summary_steps": summary_steps,
                "rates": rates,
                "throughput_ratio": round(ratio, 4),
            }
        )
    )


if __name__ == "__main__":
    main()
