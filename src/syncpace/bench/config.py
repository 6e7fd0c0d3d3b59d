"""Settings of ``syncpace bench``: one validated dataclass, flags and variables derived.

Sizes are written as nccl-tests writes them: ``8``, ``1K``, ``128M``, ``1G`` with
binary multiples (``K`` = 1024).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from syncpace.bench.ops import resolve_ops
from syncpace.config import check_numbers, setting
from syncpace.errors import BenchError

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_MULTIPLE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
#: The largest message size accepted (1 TiB): beyond any device's memory.
MAX_SIZE = 1 << 40

#: Accepted ``--dtype`` spellings → the canonical name (nccl-tests' where it has one).
DTYPE_ALIASES = {
    "float": "float",
    "float32": "float",
    "fp32": "float",
    "half": "half",
    "float16": "half",
    "fp16": "half",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "double": "double",
    "float64": "double",
    "fp64": "double",
    "int8": "int8",
    "char": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "int": "int32",
    "int64": "int64",
}
REDOPS = ("sum", "min", "max")


def parse_size(text: str | int, what: str = "size") -> int:
    """``"8"``, ``"1K"``, ``"128M"``, ``"1GiB"`` → bytes (binary multiples)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise BenchError(
                f"{what}: cannot read {text!r} as a size; write e.g. 8, 64K, 128M, 1G "
                "(bytes, K/M/G = 1024-multiples)"
            )
        value = int(match.group(1)) * _MULTIPLE[match.group(2).lower()]
    if not 1 <= value <= MAX_SIZE:
        raise BenchError(f"{what}: must be in 1 byte..1T, got {text!r}")
    return value


def format_size(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


@dataclass(kw_only=True, slots=True)
class BenchConfig:
    """What ``syncpace bench`` measures, how long, and where it writes. Read by each rank
    from ``SYNCPACE_BENCH_*`` variables when the launcher starts it (``--nproc``)."""

    ENV_PREFIX: ClassVar[str] = "SYNCPACE_BENCH_"

    ops: str = setting(
        "all",
        "Ops to run, comma-separated: all_reduce, all_gather, reduce_scatter, broadcast, "
        "reduce, all_to_all, sendrecv, or 'all'.",
    )
    min_bytes: str = setting("8", "Smallest message size (-b), e.g. 8, 1K, 1M.")
    max_bytes: str = setting("16M", "Largest message size (-e), e.g. 128M.")
    step_factor: int = setting(2, "Multiply the size by this between steps of the sweep (-f).")
    iters: int = setting(20, "Timed iterations per size (-n).")
    warmup: int = setting(5, "Untimed iterations per size before timing (-w).")
    gap_ms: float = setting(
        0.0,
        "Idle time before each timed iteration, ms, as a training step computes between "
        "its collectives (links and shapers then start each call rested, as in the job).",
    )
    dtype: str = setting("float", "Element type (-d): float, half, bfloat16, double, int8, ...")
    redop: str = setting("sum", "Reduction of the reducing ops (nccl-tests' -o): sum, min, max.")
    root: int = setting(0, "Root rank of broadcast and reduce (-r).")
    inplace: bool = setting(False, "Run in place (output buffer holds the input).")
    check: bool = setting(True, "Check every size's result on data and count #wrong (-c).")
    pairs: bool = setting(True, "Measure the pairwise point-to-point matrix after the sweep.")
    pairs_only: bool = setting(False, "Only measure the pairwise matrix, no op sweep.")
    pair_bytes: str = setting("1M", "Message size of the pairwise bandwidth measurement.")
    pair_latency_bytes: str = setting("8", "Message size of the pairwise latency ping-pong.")
    pair_iters: int = setting(10, "Timed exchanges per direction of each pair.")
    pairs_serial: bool = setting(
        False,
        "Measure one pair at a time instead of rounds of disjoint pairs (isolates pairs "
        "that share an oversubscribed link, at n/2 times the duration).",
    )
    slow_fraction: float = setting(
        0.7, "Flag a pair whose bandwidth is below this fraction of the upper quartile of pairs."
    )
    backend: str = setting("", "Process-group backend: gloo or nccl (default: nccl on GPUs).")
    out: str = setting("", "Run directory for the trace and bench.json (default ./syncpace-bench).")
    overwrite: bool = setting(False, "Replace this run directory's earlier bench files.")
    nproc: int = setting(0, "Start this many local gloo ranks (outside torchrun).")
    timeout_s: float = setting(600.0, "Bound on every wait (process group, launch join).")

    def __post_init__(self) -> None:
        check_numbers(
            self,
            BenchError,
            step_factor="[2, 1024]",
            iters="[1, 100000]",
            warmup="[0, 100000]",
            gap_ms="[0, 60000]",
            root="[0, 1000000]",
            pair_iters="[1, 10000]",
            slow_fraction="(0, 1)",
            nproc="[0, 64]",
            timeout_s="(0, 86400]",
        )
        resolve_ops(self.ops)
        lo, hi = self.min_bytes_n, self.max_bytes_n
        if lo > hi:
            raise BenchError(f"min_bytes ({self.min_bytes}) is larger than max_bytes ({hi})")
        if self.dtype.lower() not in DTYPE_ALIASES:
            raise BenchError(
                f"unknown dtype {self.dtype!r}; one of {', '.join(sorted(set(DTYPE_ALIASES)))}"
            )
        if self.redop not in REDOPS:
            raise BenchError(f"unknown redop {self.redop!r}; one of {', '.join(REDOPS)}")
        parse_size(self.pair_bytes, "pair_bytes")
        parse_size(self.pair_latency_bytes, "pair_latency_bytes")
        if self.backend not in ("", "gloo", "nccl"):
            raise BenchError(f"backend must be gloo or nccl, got {self.backend!r}")
        if self.nproc == 1:
            raise BenchError("nproc must be at least 2: a benchmark of collectives needs peers")
        if self.pairs_only and not self.pairs:
            raise BenchError("pairs_only needs pairs; drop --no-pairs")

    @property
    def min_bytes_n(self) -> int:
        return parse_size(self.min_bytes, "min_bytes")

    @property
    def max_bytes_n(self) -> int:
        return parse_size(self.max_bytes, "max_bytes")

    @property
    def dtype_name(self) -> str:
        return DTYPE_ALIASES[self.dtype.lower()]

    def sizes(self) -> list[int]:
        """The sweep: min, min·f, min·f², … up to max (nccl-tests' ``-b -e -f``)."""
        out, size = [], self.min_bytes_n
        while size <= self.max_bytes_n:
            out.append(size)
            size *= self.step_factor
        return out
