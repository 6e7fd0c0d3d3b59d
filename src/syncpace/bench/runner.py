"""One rank of ``syncpace bench``: the size sweep of every op, the pair matrix, and on
rank 0 the table, the α–β fits and ``bench.json``.

Runs inside any distributed launch (torchrun, ``syncpace fabric run``, the local
self-launch): it reads RANK / WORLD_SIZE / LOCAL_RANK from the environment. The
tracer is attached before the process group exists, and every size ends with
``syncpace.step()``, so the run directory is a trace in which step *k* holds the calls
of the *k*-th row of ``bench.json``.

Timing (see docs/bench.md): each rank times every iteration of back-to-back blocking
calls; a size's time is the mean over iterations of the per-iteration mean over
ranks — nccl-tests' default (``-a 1``) of averaging each rank's mean iteration time.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import time
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

import syncpace
from syncpace.bench import ops as op_table
from syncpace.bench import pairs as pair_mod
from syncpace.bench import rundir, table
from syncpace.bench.config import BenchConfig, parse_size
from syncpace.bench.fit import fit_rows
from syncpace.bench.results import BenchResult, IterStats, PairMatrix, SizeRow, write_bench
from syncpace.bench.sync import StoreSync, default_store
from syncpace.console import make_console
from syncpace.errors import BenchError
from syncpace.telemetry.host import env_int
from syncpace.trace.busbw import bus_factor

#: Test hook: ``RANK`` or ``OP:RANK``. On that rank, element 0 of the input of the
#: correctness run is perturbed, so the check must count wrong elements.
CORRUPT_ENV = "SYNCPACE_BENCH_CORRUPT"

_TORCH_DTYPES = {
    "float": "float32",
    "half": "float16",
    "bfloat16": "bfloat16",
    "double": "float64",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "int64": "int64",
}


def _env_int(name: str, default: int | None = None) -> int:
    value = env_int(name)
    if value is None or value < 0:
        if default is None:
            raise BenchError(f"{name} is not set; launch with torchrun or use --nproc N")
        return default
    return value


def _corrupt_target(op: str, rank: int) -> bool:
    spec = os.environ.get(CORRUPT_ENV, "")
    if not spec:
        return False
    target_op, _, target_rank = spec.rpartition(":")
    return (not target_op or target_op == op) and target_rank == str(rank)


class RankBench:
    """The benchmark as seen from one rank of an initialised process group."""

    def __init__(
        self,
        config: BenchConfig,
        torch: Any,
        dist: Any,
        device: Any,
        sync: StoreSync,
        console: Console | None,
    ) -> None:
        self.config = config
        self.torch = torch
        self.dist = dist
        self.device = device
        self.sync = sync
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.dtype = getattr(torch, _TORCH_DTYPES[config.dtype_name])
        self.elsize = torch.empty((), dtype=self.dtype).element_size()
        self.console = console  # rank 0 only
        self.step = 0
        self._mark = syncpace.step

    # Helpers --------------------------------------------------------------------
    def _sync_device(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def _end_step(self) -> int:
        self._mark()
        self.step += 1
        return self.step - 1

    def _print(self, lines: list[str] | str) -> None:
        if self.console is not None:
            for line in [lines] if isinstance(lines, str) else lines:
                self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    # The sweep ------------------------------------------------------------------
    def measure_size(self, op: str, lay: op_table.Layout) -> tuple[list[float], int | None]:
        """This rank's per-iteration times (µs) and its count of wrong elements."""
        cfg, torch = self.config, self.torch
        args = (self.rank, self.world, cfg.root)

        def buffers() -> op_table.Buffers:
            return op_table.make_buffers(
                torch,
                op,
                lay,
                self.rank,
                self.world,
                cfg.root,
                self.dtype,
                self.device,
                cfg.inplace,
            )

        bufs = buffers()
        for _ in range(cfg.warmup):
            op_table.run_op(self.dist, op, bufs, *args, cfg.redop)
        self._sync_device()
        times = []
        for _ in range(cfg.iters):
            if cfg.gap_ms:
                # every rank left the last call together; the same sleep keeps them so
                time.sleep(cfg.gap_ms / 1e3)
            start = time.perf_counter_ns()
            op_table.run_op(self.dist, op, bufs, *args, cfg.redop)
            self._sync_device()
            times.append((time.perf_counter_ns() - start) / 1e3)
        wrong = None
        if cfg.check:  # fresh buffers: timed iterations of in-place ops accumulate
            bufs = buffers()
            if _corrupt_target(op, self.rank):
                bufs.input.view(-1)[0] = 5
            op_table.run_op(self.dist, op, bufs, *args, cfg.redop)
            self._sync_device()
            expected = op_table.expected_output(torch, op, lay, *args, cfg.redop)
            wrong = op_table.count_wrong(torch, bufs.output, expected)
        return times, wrong

    def sweep(self, op: str, progress: Progress | None, task: Any) -> list[SizeRow]:
        cfg = self.config
        spec = op_table.OPS[op]
        factor = bus_factor(op, self.world) or 1.0
        rows: list[SizeRow] = []
        self._print(
            table.header(
                op,
                self.world,
                self.dist.get_backend(),
                str(self.device),
                cfg.inplace,
                cfg.iters,
                cfg.warmup,
            )
        )
        for size in cfg.sizes():
            lay = op_table.layout(op, size, self.world, self.elsize)
            if lay is not None:
                times, wrong = self.measure_size(op, lay)
                step = self._end_step()
                tag = f"size/{op}/{size}"
                self.sync.put(tag, {"times_us": times, "wrong": wrong})
                if self.rank == 0:
                    row = self._row(op, lay, step, self.sync.gather(tag), factor, spec)
                    rows.append(row)
                    self._print(table.row(row))
            if progress is not None:
                progress.advance(task)
        self._print(table.footer(rows))
        return rows

    def _row(
        self,
        op: str,
        lay: op_table.Layout,
        step: int,
        per_rank: list[dict],
        factor: float,
        spec: op_table.OpSpec,
    ) -> SizeRow:
        cfg = self.config
        iters = [sum(p["times_us"][i] for p in per_rank) / self.world for i in range(cfg.iters)]
        stats = IterStats.of(iters)
        seconds = stats.mean_us / 1e6
        algbw = lay.size_bytes / seconds / 1e9
        wrongs = [p["wrong"] for p in per_rank]
        return SizeRow(
            op=op,
            size_bytes=lay.size_bytes,
            count=lay.count,
            dtype=cfg.dtype_name,
            redop=cfg.redop if spec.reduces else "none",
            root=cfg.root if spec.rooted else -1,
            time_us=stats.mean_us,
            algbw_gbps=algbw,
            busbw_gbps=algbw * factor,
            wrong=None if any(w is None for w in wrongs) else sum(wrongs),
            stats=stats,
            rank_time_us=tuple(sum(p["times_us"]) / cfg.iters for p in per_rank),
            step=step,
            iter_us=tuple(iters),
        )

    # Pairs ---------------------------------------------------------------------
    def pair_matrix(self, hosts: list[str], progress: Progress | None, task: Any) -> PairMatrix:

        cfg = self.config
        probe = pair_mod.PairProbe(
            self.dist,
            self.torch,
            self.device,
            parse_size(cfg.pair_bytes),
            parse_size(cfg.pair_latency_bytes),
            cfg.pair_iters,
            self._sync_device,
        )
        rounds = pair_mod.round_robin(self.world)
        mine: list[pair_mod.Direction] = []
        for index, pairs in enumerate(rounds):
            groups = [[p] for p in pairs] if cfg.pairs_serial else [pairs]
            for k, group in enumerate(groups):
                for a, b in group:
                    if self.rank in (a, b):
                        mine += probe.measure(self.rank, a, b)
                # a rank that sits out waits here, bounded, so rounds do not overlap
                self.sync.barrier(f"pairs/{index}/{k}")
            self._end_step()
            if progress is not None:
                progress.advance(task)
        everyone = self.sync.all_gather("pairs/result", [asdict(d) for d in mine])
        directions = [pair_mod.Direction(**d) for part in everyone for d in part]
        lat, bw = pair_mod.matrices(self.world, directions)
        median, reference, slow, suspects = pair_mod.flag_slow(bw, cfg.slow_fraction)
        return PairMatrix(
            hosts=tuple(hosts),
            latency_us=tuple(map(tuple, lat)),
            bandwidth_gbps=tuple(map(tuple, bw)),
            message_bytes=probe.large.numel(),
            latency_bytes=probe.small.numel(),
            iters=cfg.pair_iters,
            rounds=len(rounds),
            serial=cfg.pairs_serial,
            slow_fraction=cfg.slow_fraction,
            median_gbps=median,
            reference_gbps=reference,
            slow=slow,
            suspects=suspects,
        )

    # Whole run -----------------------------------------------------------------
    def run(self) -> BenchResult | None:
        cfg = self.config
        if cfg.root >= self.world:
            raise BenchError(f"root {cfg.root} is not a rank of this {self.world}-rank job")
        hosts = self.sync.all_gather("hosts", socket.gethostname())
        ops = () if cfg.pairs_only else op_table.resolve_ops(cfg.ops)
        total = len(ops) * len(cfg.sizes()) + (
            len(pair_mod.round_robin(self.world)) if cfg.pairs else 0
        )
        progress = None
        if self.console is not None and self.console.is_terminal:
            progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
        rows: list[SizeRow] = []
        matrix = None
        with progress or contextlib.nullcontext():
            task = progress.add_task("bench", total=total) if progress else None
            for op in ops:
                if progress is not None:
                    progress.update(task, description=op)
                rows += self.sweep(op, progress, task)
            if cfg.pairs:
                if progress is not None:
                    progress.update(task, description="pairs")
                matrix = self.pair_matrix(hosts, progress, task)
        if self.rank != 0:
            return None
        return BenchResult(
            world_size=self.world,
            backend=str(self.dist.get_backend()),
            device=str(self.device),
            dtype=cfg.dtype_name,
            inplace=cfg.inplace,
            iters=cfg.iters,
            warmup=cfg.warmup,
            hosts=tuple(hosts),
            rows=tuple(rows),
            fits=fit_rows(rows, self.world),
            pairs=matrix,
            settings={k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        )


def run_rank(config: BenchConfig, json_out: bool = False) -> int:
    """Run this process as one rank; returns the exit code (1 when #wrong > 0)."""
    rank = _env_int("RANK")
    world = _env_int("WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK", 0)
    if world < 2:
        raise BenchError("a benchmark of collectives needs at least 2 ranks (WORLD_SIZE=1)")
    run_dir = rundir.resolve(config)
    rundir.prepare_rank(run_dir, rank, config.overwrite)

    import torch
    import torch.distributed as dist

    syncpace.attach(str(run_dir))  # a no-op when syncpace run armed it already
    backend = config.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, timeout=timedelta(seconds=config.timeout_s))
    try:
        sync = StoreSync(default_store(), rank, world, config.timeout_s)
        console = make_console(stderr=json_out, highlight=False) if rank == 0 else None
        result = RankBench(config, torch, dist, device, sync, console).run()
        if result is not None:
            path = write_bench(result, run_dir)
            _report(result, path, console, json_out)
            sync.publish("wrong", result.wrong)
        wrong = sync.read("wrong")
    finally:
        gc.collect()  # drop buffers and works before gloo tears its pairs down
        dist.destroy_process_group()
    return 1 if wrong else 0


def _report(result: BenchResult, path: Any, console: Console | None, json_out: bool) -> None:
    import json

    if json_out:
        print(json.dumps(result.to_json(), indent=1), flush=True)
        return
    assert console is not None
    lines = table.fit_lines(result) if result.fits else []
    if result.pairs is not None:
        lines += table.pair_lines(result.pairs)
    lines += ["#", f"# results: {path}"]
    if result.wrong:
        lines.append(f"# {result.wrong} wrong elements: the results are not correct")
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
