"""What does tracing cost a job? Traced and untraced runs, alternated in one run.

1. Per-collective cost: one traced gloo rank issuing tiny all-reduces (the network
   cannot hide anything there) alternately on its traced default group and on the
   plain group inside it, which holds the same backend: the median paired difference
   is exactly what tracing adds per call.
2. Throughput: a 4-rank gloo DDP job with one gradient bucket per layer (>= 50
   all-reduces per step), traced vs untraced, alternated ``--pairs`` times; the
   ratio of median step rates.
3. The stall watchdog's share: the same DDP job traced with the watchdog off
   (``stall_after_s=0``) in the same alternation; the ratio of traced with it to
   traced without it is what the in-flight registry and its thread cost.

Traced runs are armed exactly as ``syncpace run`` arms them (the bootstrap on
PYTHONPATH, no code change). Figures are medians; on a shared machine only the
ratios measured side by side mean anything.

    python benchmarks/tracer_overhead.py [--pairs 5] [--ranks 4] [--layers 64]
    python benchmarks/tracer_overhead.py --continuous   # the same, in always-on mode
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from _ranks import spawn_ranks
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.trace import load_trace

WORKER = Path(__file__).with_name("_overhead_worker.py")


CONTINUOUS = False  # --continuous: traced runs in always-on mode (rotation, monitor)


def launch(world: int, args: list[str], trace_dir: Path | None, watchdog: bool = True) -> Any:
    base = dict(os.environ)
    if trace_dir is not None:
        config = TraceConfig(
            dir=str(trace_dir),
            clock_interval_s=0,
            stall_after_s=TraceConfig().stall_after_s if watchdog else 0.0,
            continuous=CONTINUOUS,
            segment_s=5.0,
        )
        base = traced_env(trace_dir, config, base)
    procs = spawn_ranks(world, [str(WORKER), *args], base)
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outputs, strict=True):
        if p.returncode not in (0, -6):  # -6: gloo's rare abort after teardown
            raise SystemExit(f"benchmark rank failed ({p.returncode}):\n{err[-2000:]}")
    return json.loads(outputs[0][0].strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="traced/untraced pairs per part")
    parser.add_argument("--ranks", type=int, default=4, help="ranks of the DDP job")
    parser.add_argument("--layers", type=int, default=96, help="DDP layers (~ buckets per step)")
    parser.add_argument("--hidden", type=int, default=64, help="width of each layer")
    parser.add_argument("--steps", type=int, default=30, help="measured DDP steps per run")
    parser.add_argument(
        "--continuous", action="store_true", help="trace in always-on mode (rotation, monitor)"
    )
    args = parser.parse_args()
    global CONTINUOUS
    CONTINUOUS = args.continuous
    console = Console()
    micro: dict[str, list[float]] = {"untraced": [], "traced": [], "added": [], "added_nowd": []}
    rates = {"untraced": [], "traced": [], "no_watchdog": []}
    per_step = []
    with tempfile.TemporaryDirectory() as tmp, Progress(console=console) as progress:
        task = progress.add_task("alternating traced / untraced runs", total=5 * args.pairs)
        for i in range(args.pairs):
            for traced in (False, True):
                key = "traced" if traced else "untraced"
                if traced:
                    blocks = launch(1, ["micro", "9", "1000"], Path(tmp) / f"micro{i}")
                    for name in ("traced", "untraced"):
                        micro[name].append(statistics.median(blocks[name]))
                    pairs = zip(blocks["traced"], blocks["untraced"], strict=True)
                    micro["added"].append(statistics.median(a - b for a, b in pairs))
                    nowd = launch(1, ["micro", "9", "1000"], Path(tmp) / f"mnowd{i}", False)
                    pairs = zip(nowd["traced"], nowd["untraced"], strict=True)
                    micro["added_nowd"].append(statistics.median(a - b for a, b in pairs))
                progress.advance(task)
                trace_dir = Path(tmp) / f"ddp{i}" if traced else None
                ddp_args = ["ddp", str(args.steps), str(args.layers), str(args.hidden)]
                times = launch(args.ranks, ddp_args, trace_dir)
                rates[key].append(1 / statistics.median(times))
                progress.advance(task)
                if traced:
                    plain = launch(args.ranks, ddp_args, Path(tmp) / f"nowd{i}", watchdog=False)
                    rates["no_watchdog"].append(1 / statistics.median(plain))
                    progress.advance(task)
                    trace = load_trace(trace_dir)
                    ar = trace.events.filter(
                        (trace.events["rank"] == 0) & (trace.events["step"] >= 4)
                    )
                    per_step.append(ar.height / max(ar["step"].n_unique(), 1))
    cost = statistics.median(micro["added"])
    cost_nowd = statistics.median(micro["added_nowd"])
    ratio = statistics.median(rates["traced"]) / statistics.median(rates["untraced"])
    watchdog_ratio = statistics.median(rates["traced"]) / statistics.median(rates["no_watchdog"])
    mode = "always-on" if args.continuous else "traced"
    table = Table(title=f"tracer overhead, {mode} (medians; traced and untraced alternated)")
    table.add_column("measure")
    table.add_column("untraced", justify="right")
    table.add_column("traced", justify="right")
    table.add_column("result", justify="right")
    table.add_row(
        "µs per tiny all-reduce, 1 rank (same process)",
        f"{statistics.median(micro['untraced']):.1f}",
        f"{statistics.median(micro['traced']):.1f}",
        f"+{cost:.1f} µs/collective",
    )
    table.add_row(
        f"DDP steps/s, {args.ranks} ranks, {statistics.median(per_step):.0f} collectives/step",
        f"{statistics.median(rates['untraced']):.2f}",
        f"{statistics.median(rates['traced']):.2f}",
        f"ratio {ratio:.3f}",
    )
    table.add_row(
        "µs added per tiny all-reduce: watchdog off vs on",
        f"+{cost_nowd:.1f}",
        f"+{cost:.1f}",
        f"{cost - cost_nowd:+.1f} µs/collective",
    )
    table.add_row(
        "DDP steps/s traced: watchdog off vs on",
        f"{statistics.median(rates['no_watchdog']):.2f}",
        f"{statistics.median(rates['traced']):.2f}",
        f"ratio {watchdog_ratio:.3f}",
    )
    console.print(table)
    print(
        json.dumps(
            {
                "per_collective_us": round(cost, 2),
                "per_collective_us_watchdog_off": round(cost_nowd, 2),
                "throughput_ratio": round(ratio, 4),
                "watchdog_ratio": round(watchdog_ratio, 4),
                "collectives_per_step": statistics.median(per_step),
                "pairs": args.pairs,
                "continuous": args.continuous,
            }
        )
    )


if __name__ == "__main__":
    main()
