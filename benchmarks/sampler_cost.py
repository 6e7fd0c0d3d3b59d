"""What does the host sampler cost a node? CPU of one core and disk, per cadence.

The sampler runs exactly as a traced job starts it (``python -m
syncpace.telemetry.sampler``, a child process), for ``--seconds`` at each cadence, idle
and while a loopback TCP flow makes every NIC and TCP counter change at every tick
(the worst case of the change encoding). Its CPU is its own account of
``CLOCK_PROCESS_CPUTIME_ID`` over the run (the ``sampler/cpu_ns`` series, so start-up
is left out) and, for comparison, the child's total from ``wait4`` (start-up included).
Each point is repeated ``--repeats`` times; medians are printed.

With ``--job PAIRS``, it also measures what a node's sampler costs a job: the 4-rank
DDP job of ``tracer_overhead.py``, traced with the sampler off and on (at the first
cadence), alternated ``PAIRS`` times; the ratio of median step rates.

    python benchmarks/sampler_cost.py [--seconds 10] [--repeats 3] [--cadences 0.01,0.001]
                                      [--job 5]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import polars as pl
from _ranks import spawn_ranks
from rich.console import Console
from rich.table import Table

from syncpace.capture.clock import LocalClock
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.telemetry import TelemetryConfig
from syncpace.trace.reader import load_host_files


class LoopbackFlow:
    """A TCP flow over loopback at a bounded rate, so counters move every tick."""

    def __init__(self, rate_bytes_s: float = 50e6) -> None:
        self.rate = rate_bytes_s
        self.stop = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.threads = [
            threading.Thread(target=self._recv, daemon=True),
            threading.Thread(target=self._send, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _recv(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            while conn.recv(1 << 16):
                pass

    def _send(self) -> None:
        chunk = b"\0" * 16384
        start, sent = time.monotonic(), 0
        with socket.create_connection(self.server.getsockname()) as sock:
            while not self.stop.is_set():
                ahead = start + sent / self.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                sock.sendall(chunk)
                sent += len(chunk)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)
        self.server.close()


def run_once(interval_s: float, seconds: float, nics: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        clock = LocalClock()
        spec = {
            "run_dir": str(run),
            "host": "bench",
            "rank": 0,
            "interval_s": interval_s,
            "slow_interval_s": 0.1,
            "nics": nics,
            "link_rate": "",
            "clock": {"base_ns": clock.base_ns, "origin_ns": 0, "rate": 0.0},
            "rank_meta": str(run / "none.json"),
            "parent_pid": os.getpid(),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "syncpace.telemetry.sampler", json.dumps(spec)],
            stdin=subprocess.PIPE,
        )
        time.sleep(seconds)  # the measured duration itself
        assert proc.stdin is not None
        proc.stdin.close()
        _, _, usage = os.wait4(proc.pid, 0)
        counters, hosts = load_host_files(run, [])
        meta = hosts["bench"]
        cpu = counters.filter(pl.col("counter") == "cpu_ns").sort("time_ns")
        span_ns = int(cpu["time_ns"][-1] - cpu["time_ns"][0])
        steady = (cpu["value"][-1] - cpu["value"][0]) / span_ns
        size = (run / "host-bench.counters.arrow").stat().st_size
        return {
            "cpu_pct": 100 * steady,
            "cpu_total_s": usage.ru_utime + usage.ru_stime,
            "ticks_per_s": meta["ticks"] / (span_ns / 1e9),
            "late_pct": 100 * meta["late_ticks"] / max(meta["ticks"], 1),
            "rows_per_s": meta["rows"] / (span_ns / 1e9),
            "kb_per_s": size / 1024 / (span_ns / 1e9),
        }


WORKER = Path(__file__).with_name("_overhead_worker.py")


def ddp_rate(sampler: str, interval_s: float, ranks: int = 4) -> float:
    """Median steps/s of the DDP job, traced, with the host sampler ``sampler``."""
    with tempfile.TemporaryDirectory() as tmp:
        config = TraceConfig(dir=tmp, clock_interval_s=0)
        sampling = TelemetryConfig(host_sampler=sampler, counters_interval_s=interval_s)
        base = traced_env(Path(tmp), config, dict(os.environ), sampling)
        procs = spawn_ranks(ranks, [str(WORKER), "ddp", "30", "96", "64"], base)
        outputs = [p.communicate(timeout=600) for p in procs]
        for p, (_out, err) in zip(procs, outputs, strict=True):
            if p.returncode not in (0, -6):  # -6: gloo's rare abort after teardown
                raise SystemExit(f"benchmark rank failed ({p.returncode}):\n{err[-2000:]}")
        times = json.loads(outputs[0][0].strip().splitlines()[-1])
        return 1 / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cadences", default="0.01,0.001", help="seconds, comma-separated")
    parser.add_argument("--nics", default="", help="interfaces (default: the sampler's choice)")
    parser.add_argument("--job", type=int, default=0, help="off/on pairs of the DDP job")
    args = parser.parse_args()
    console = Console()
    table = Table(title="host sampler cost (medians)")
    for col in ("cadence", "load", "CPU % of a core", "ticks/s", "late %", "rows/s", "KiB/s"):
        table.add_column(col, justify="right")
    results = []
    for cadence in (float(c) for c in args.cadences.split(",")):
        for load in ("idle", "loopback flow"):
            nics = args.nics or ("lo" if load == "loopback flow" else "")
            runs = []
            for _ in range(args.repeats):
                flow = LoopbackFlow() if load != "idle" else None
                try:
                    runs.append(run_once(cadence, args.seconds, nics))
                finally:
                    if flow is not None:
                        flow.close()
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            results.append({"cadence_s": cadence, "load": load, **med, "runs": runs})
            table.add_row(
                f"{cadence * 1e3:g} ms",
                load,
                f"{med['cpu_pct']:.2f}",
                f"{med['ticks_per_s']:.0f}",
                f"{med['late_pct']:.1f}",
                f"{med['rows_per_s']:.0f}",
                f"{med['kb_per_s']:.1f}",
            )
    console.print(table)
    job = {}
    if args.job:
        cadence = float(args.cadences.split(",")[0])
        rates: dict[str, list[float]] = {"off": [], "process": []}
        for _ in range(args.job):
            for mode in rates:
                rates[mode].append(ddp_rate(mode, cadence))
        ratio = statistics.median(rates["process"]) / statistics.median(rates["off"])
        job = {"cadence_s": cadence, "pairs": args.job, "ratio": ratio, "rates": rates}
        console.print(
            f"DDP job, 4 ranks, steps/s with the sampler at {cadence * 1e3:g} ms over without: "
            f"ratio {ratio:.3f} (medians of {args.job} alternated pairs)"
        )
    print(json.dumps({"sampler": results, "job": job}))


if __name__ == "__main__":
    main()
