"""How long from a stall to its record on disk? A 2-rank gloo job where rank 1 stops.

Rank 1 sleeps before its last all-reduce; rank 0 enters it and waits. The watchdog of
rank 0 must write ``rank-00000.stall.json`` (kind ``in_collective``) once the call has
been in flight for ``stall_after_s``, and rank 1's watchdog its ``no_progress`` record.
The driver polls the run directory every 5 ms and notes when each record appears; the
stall began at the record's own ``since_ns`` (the entry into the call; the ranks and the
driver share one host clock). Reported per threshold, over ``--runs`` jobs: the time
from the stall to the record on disk, and that time beyond the threshold (the
watchdog wakes when the oldest call crosses it, so this is the flush and the write).

    python benchmarks/stall_latency.py [--runs 5] [--thresholds 2,8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from syncpace.ports import free_port
from syncpace.trace.stall import read_stall, stall_path

WORKER = Path(__file__).with_name("_stall_worker.py")
BOUND_S = 300


def one_run(out: Path, after: float) -> dict[int, float]:
    """Seconds from each rank's stall start to its record on disk."""
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        out.mkdir(parents=True, exist_ok=True)
        with (out / f"rank{rank}.log").open("w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(WORKER), str(out), str(after)],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    seen: dict[int, int] = {}
    deadline = time.monotonic() + BOUND_S
    try:
        while len(seen) < 2 and time.monotonic() < deadline:
            for rank in range(2):
                if rank not in seen and stall_path(out, rank).exists():
                    seen[rank] = time.time_ns()
            if any(p.poll() is not None for p in procs):
                logs = "".join((out / f"rank{r}.log").read_text()[-1500:] for r in range(2))
                raise SystemExit(f"a rank ended before its stall record: {out}\n{logs}")
            time.sleep(0.005)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    if len(seen) < 2:
        raise SystemExit(f"no stall records within {BOUND_S}s: {out}")
    return {r: (t - read_stall(stall_path(out, r)).since_ns) / 1e9 for r, t in seen.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="jobs per threshold")
    parser.add_argument("--thresholds", default="2,8", help="stall_after_s values, comma-separated")
    args = parser.parse_args()
    thresholds = [float(t) for t in args.thresholds.split(",")]
    results: dict[float, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for after in thresholds:
            runs = [one_run(Path(tmp) / f"t{after}-{i}", after) for i in range(args.runs)]
            results[after] = {
                "in_collective": [r[0] for r in runs],
                "no_progress": [r[1] for r in runs],
            }
    table = Table(title="stall to record on disk (medians and max over runs)")
    for col in ("threshold", "record", "to disk, median", "beyond threshold, median", "max"):
        table.add_column(col, justify="right")
    summary = {}
    for after, kinds in results.items():
        for kind, values in kinds.items():
            med = statistics.median(values)
            table.add_row(
                f"{after:g} s", kind, f"{med:.3f} s", f"{med - after:.3f} s", f"{max(values):.3f} s"
            )
            summary[f"{after:g}s/{kind}"] = {
                "median_s": round(med, 4),
                "beyond_threshold_s": round(med - after, 4),
                "max_s": round(max(values), 4),
                "runs": len(values),
            }
    Console().print(table)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
