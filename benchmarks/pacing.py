"""Does pacing help this machine's jobs, and what does it cost when idle?

1. Idle cost: a balanced 4-rank job, traced without pacing vs traced with the pacing
   controller running (it never activates): ratio of median throughputs.
2. Injected skew: rank 0 does a fraction of the others' CPU work per step (jitter on
   all): throughput and iteration CV with pacing off, on (no A/B guard) and A/B-guarded,
   side by side.

Configurations are alternated ``--rounds`` times; figures are medians. The ranks share
this machine's cores, so CPU freed by a paced (sleeping) rank is the only way pacing
can speed anything up here: the numbers say whether it does.

    python benchmarks/pacing.py [--rounds 3] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.control.config import PacingConfig
from syncpace.ports import free_port
from syncpace.trace import load_trace
from syncpace.trace.summary import pacing_summary

WORKER = Path(__file__).with_name("_pacing_worker.py")
# A threshold no skew reaches: the controller gathers and decides every step, never delays.
NEVER = PacingConfig(strategy="early", ab=False, on_skew=10.0, off_skew=5.0)
CONFIGS = {
    # name: (job, pacer settings)
    "idle: tracer only": ("balanced", PacingConfig()),
    "idle: pacer running": ("balanced", NEVER),
    "skew: pacing off": ("skewed", PacingConfig()),
    "skew: pacing on": ("skewed", PacingConfig(strategy="early", ab=False)),
    "skew: A/B-guarded": ("skewed", PacingConfig(strategy="early", ab_window=10)),
}


def launch(ranks: int, args: list[str], out: Path, *configs: object) -> list[float]:
    env = traced_env(out, TraceConfig(dir=str(out), step_hook=False), None, *configs)
    port = free_port()
    procs = []
    for rank in range(ranks):
        rank_env = dict(env, RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank))
        rank_env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        command = [sys.executable, str(WORKER), *args]
        procs.append(
            subprocess.Popen(
                command, env=rank_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_o, err) in zip(procs, outputs, strict=True):
        if p.returncode not in (0, -6):
            raise SystemExit(f"benchmark rank failed ({p.returncode}):\n{err[-2000:]}")
    return json.loads(outputs[0][0].strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--work", type=int, default=1500, help="matrix products per step")
    parser.add_argument("--early-share", type=float, default=0.4, help="rank 0's share of work")
    parser.add_argument("--jitter", type=float, default=0.1, help="lognormal sigma of work")
    args = parser.parse_args()
    jobs = {
        "balanced": [str(args.steps), str(args.work), "1.0", str(args.jitter)],
        "skewed": [str(args.steps), str(args.work), str(args.early_share), str(args.jitter)],
    }
    rates: dict[str, list[float]] = {k: [] for k in CONFIGS}
    cvs: dict[str, list[float]] = {k: [] for k in CONFIGS}
    notes: dict[str, str] = {}
    console = Console()
    with tempfile.TemporaryDirectory() as tmp, Progress(console=console) as progress:
        task = progress.add_task("alternating configurations", total=args.rounds * len(CONFIGS))
        for r in range(args.rounds):
            for i, (name, (job, pacing_config)) in enumerate(CONFIGS.items()):
                out = Path(tmp) / f"{r}-{i}"
                times = np.asarray(launch(args.ranks, jobs[job], out, pacing_config))
                rates[name].append(1 / times.mean())
                cvs[name].append(float(times.std() / times.mean()))
                pacing = pacing_summary(load_trace(out))
                if pacing:
                    notes[name] = (
                        f"{pacing['fraction_paced']:.0%} paced, A/B {pacing['ab_state'] or '-'}"
                    )
                progress.advance(task)
    med = {k: statistics.median(v) for k, v in rates.items()}
    table = Table(title=f"pacing, {args.ranks} ranks (medians of {args.rounds} alternated rounds)")
    for col in ("configuration", "steps/s", "vs baseline", "iteration CV", "pacer"):
        table.add_column(col, justify="left" if col in ("configuration", "pacer") else "right")
    baseline = {"idle": med["idle: tracer only"], "skew": med["skew: pacing off"]}
    result = {}
    for name in CONFIGS:
        ratio = med[name] / baseline[name.split(":")[0]]
        cv = statistics.median(cvs[name])
        table.add_row(name, f"{med[name]:.2f}", f"{ratio:.3f}", f"{cv:.3f}", notes.get(name, "-"))
        result[name] = {
            "steps_per_s": round(med[name], 3),
            "ratio": round(ratio, 4),
            "cv": round(cv, 4),
        }
    console.print(table)
    print(json.dumps(result))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
