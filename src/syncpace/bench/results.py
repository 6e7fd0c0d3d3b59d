"""What a benchmark run produced, as frozen dataclasses with ``to_json()``;
:func:`load_bench` reads ``bench.json`` back for ``diagnose``, ``simulate`` and reports."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syncpace.errors import TraceError
from syncpace.trace.validate.files import read_regular

BENCH_FILE = "bench.json"
SCHEMA = "syncpace.bench"
SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class IterStats:
    """Spread of the per-iteration times of one size (µs)."""

    min_us: float
    p50_us: float
    p99_us: float
    mean_us: float
    cv: float  # standard deviation / mean

    @classmethod
    def of(cls, values_us: list[float]) -> IterStats:
        values = sorted(values_us)
        n = len(values)
        mean = sum(values) / n
        var = sum((v - mean) ** 2 for v in values) / n
        return cls(
            min_us=values[0],
            p50_us=quantile(values, 0.50),
            p99_us=quantile(values, 0.99),
            mean_us=mean,
            cv=math.sqrt(var) / mean if mean > 0 else 0.0,
        )


def quantile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, by linear interpolation between closest
    ranks (numpy's default)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class SizeRow:
    """One line of the nccl-tests table, with the iteration spread."""

    op: str
    size_bytes: int
    count: int
    dtype: str
    redop: str  # "none" for ops that do not reduce
    root: int  # -1 for ops without a root
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None  # None when the check is off
    stats: IterStats
    rank_time_us: tuple[float, ...]  # each rank's mean iteration time
    step: int  # trace iteration that holds this size's calls
    iter_us: tuple[float, ...] = ()  # each timed iteration's mean over ranks, in run order

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "size_bytes": self.size_bytes,
            "count": self.count,
            "dtype": self.dtype,
            "redop": self.redop,
            "root": self.root,
            "time_us": self.time_us,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "wrong": self.wrong,
            "min_us": self.stats.min_us,
            "p50_us": self.stats.p50_us,
            "p99_us": self.stats.p99_us,
            "mean_us": self.stats.mean_us,
            "cv": self.stats.cv,
            "rank_time_us": list(self.rank_time_us),
            "step": self.step,
            "iter_us": list(self.iter_us),
        }


@dataclass(frozen=True, slots=True)
class AlphaBetaFit:
    """``time(size) = alpha + bus_factor·size / beta`` for one op.

    ``beta`` is therefore a *bus* bandwidth, comparable across ops and with the link
    rate; ``knee_bytes`` is the op size where the latency and bandwidth terms are equal.
    """

    op: str
    alpha_us: float
    beta_gbps: float  # math.inf when no bandwidth term is visible
    knee_bytes: float
    bus_factor: float
    points: int
    max_rel_error: float  # largest |fit − measured| / measured over the points

    def predict_us(self, size_bytes: float) -> float:
        bandwidth = 0.0 if math.isinf(self.beta_gbps) else 1.0 / (self.beta_gbps * 1e3)
        return self.alpha_us + self.bus_factor * size_bytes * bandwidth

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "alpha_us": self.alpha_us,
            "beta_gbps": None if math.isinf(self.beta_gbps) else self.beta_gbps,
            "knee_bytes": None if math.isinf(self.knee_bytes) else self.knee_bytes,
            "bus_factor": self.bus_factor,
            "points": self.points,
            "max_rel_error": self.max_rel_error,
        }


@dataclass(frozen=True, slots=True)
class SlowPair:
    src: int
    dst: int
    bandwidth_gbps: float
    ratio: float  # bandwidth / the reference (upper quartile) bandwidth of all pairs

    def to_json(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "bandwidth_gbps": self.bandwidth_gbps,
            "ratio": self.ratio,
        }


@dataclass(frozen=True, slots=True)
class PairMatrix:
    """Point-to-point latency and bandwidth of every ordered pair of ranks.

    ``bandwidth_gbps[i][j]`` is the rate of messages from rank ``i`` to rank ``j``;
    the diagonal is ``None``.
    """

    hosts: tuple[str, ...]  # host of each rank
    latency_us: tuple[tuple[float | None, ...], ...]
    bandwidth_gbps: tuple[tuple[float | None, ...], ...]
    message_bytes: int
    latency_bytes: int
    iters: int
    rounds: int
    serial: bool
    slow_fraction: float
    median_gbps: float
    reference_gbps: float  # slow pairs are below slow_fraction × this (upper quartile)
    slow: tuple[SlowPair, ...] = ()
    suspects: tuple[int, ...] = ()  # ranks all of whose pairs are slow

    @property
    def world_size(self) -> int:
        return len(self.hosts)

    def to_json(self) -> dict[str, Any]:
        return {
            "hosts": list(self.hosts),
            "latency_us": [list(r) for r in self.latency_us],
            "bandwidth_gbps": [list(r) for r in self.bandwidth_gbps],
            "message_bytes": self.message_bytes,
            "latency_bytes": self.latency_bytes,
            "iters": self.iters,
            "rounds": self.rounds,
            "serial": self.serial,
            "slow_fraction": self.slow_fraction,
            "median_gbps": self.median_gbps,
            "reference_gbps": self.reference_gbps,
            "slow": [p.to_json() for p in self.slow],
            "suspects": list(self.suspects),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PairMatrix:
        return cls(
            hosts=tuple(data["hosts"]),
            latency_us=tuple(tuple(r) for r in data["latency_us"]),
            bandwidth_gbps=tuple(tuple(r) for r in data["bandwidth_gbps"]),
            message_bytes=data["message_bytes"],
            latency_bytes=data["latency_bytes"],
            iters=data["iters"],
            rounds=data["rounds"],
            serial=data["serial"],
            slow_fraction=data["slow_fraction"],
            median_gbps=data["median_gbps"],
            reference_gbps=data["reference_gbps"],
            slow=tuple(SlowPair(**p) for p in data["slow"]),
            suspects=tuple(data["suspects"]),
        )


@dataclass(frozen=True, slots=True)
class BenchResult:
    world_size: int
    backend: str
    device: str
    dtype: str
    inplace: bool
    iters: int
    warmup: int
    hosts: tuple[str, ...]
    rows: tuple[SizeRow, ...] = ()
    fits: tuple[AlphaBetaFit, ...] = ()
    pairs: PairMatrix | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def wrong(self) -> int:
        return sum(r.wrong or 0 for r in self.rows)

    def avg_busbw(self, op: str) -> float:
        """nccl-tests' footer: the mean busbw over the sizes of ``op``."""
        values = [r.busbw_gbps for r in self.rows if r.op == op]
        return sum(values) / len(values) if values else 0.0

    def to_json(self) -> dict[str, Any]:
        ops = list(dict.fromkeys(r.op for r in self.rows))
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "world_size": self.world_size,
            "backend": self.backend,
            "device": self.device,
            "dtype": self.dtype,
            "inplace": self.inplace,
            "iters": self.iters,
            "warmup": self.warmup,
            "hosts": list(self.hosts),
            "wrong": self.wrong,
            "avg_busbw_gbps": {op: self.avg_busbw(op) for op in ops},
            "rows": [r.to_json() for r in self.rows],
            "fits": {f.op: f.to_json() for f in self.fits},
            "pairs": None if self.pairs is None else self.pairs.to_json(),
            "settings": self.settings,
        }


def write_bench(result: BenchResult, run_dir: str | Path) -> Path:
    """Write ``bench.json`` atomically (temp file + rename)."""
    path = Path(run_dir) / BENCH_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=1, allow_nan=False))
    tmp.replace(path)
    return path


#: The largest ``bench.json`` read: a pair matrix of 4,096 ranks is about 200 MB.
MAX_BENCH_BYTES = 512 << 20


def load_bench(path: str | Path) -> dict[str, Any]:
    """``bench.json`` of a run directory (or the file itself), validated, as a dict."""
    path = Path(path)
    if path.is_dir():
        path = path / BENCH_FILE
    if not path.exists() and not path.is_symlink():
        raise TraceError(path, "no benchmark results here (run syncpace bench)")
    # a regular file within a bound: a device or a FIFO named here is refused, not read
    # until memory runs out (``--bench /dev/zero``)
    raw = read_regular(path, MAX_BENCH_BYTES, "benchmark results file")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise TraceError(path, f"cannot read benchmark results: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise TraceError(path, f"not a {SCHEMA} file")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise TraceError(
            path,
            f"{SCHEMA} version {data.get('schema_version')} is not supported "
            f"(this syncpace reads version {SCHEMA_VERSION})",
        )
    return data


def main_fit(data: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The α–β fit that stands for the fabric in a loaded ``bench.json``: all-reduce's
    when it was measured, else the first op's; ``None`` without any fit."""
    fits = data.get("fits") or {}
    op = "all_reduce" if "all_reduce" in fits else next(iter(fits), None)
    return None if op is None else (op, fits[op])


def load_pair_matrix(path: str | Path) -> PairMatrix | None:
    pairs = load_bench(path).get("pairs")
    return None if pairs is None else PairMatrix.from_json(pairs)
