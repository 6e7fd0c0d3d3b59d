"""Calibration: α, β and compute-noise parameters from ``syncpace bench`` or a real trace.

* **bench** (``bench.json`` or its run directory): the all-reduce α–β fit
  (``time = α + bus_factor·size/β``). ``α`` is the whole collective's latency; a ring
  pays it in ``2(n-1)`` steps, so the per-step α is ``α / (2(n-1))``. ``β`` is a bus
  bandwidth, i.e. the per-rank link rate of the flat α–β model: it becomes the NIC rate
  when the benchmark spanned several hosts, the intra-node rate otherwise.
* **trace** (a run directory): per rank and iteration, compute ≈ the issue of the last
  collective minus the step start (DDP issues its last bucket at the end of backward),
  giving the median compute time, the persistent per-rank spread (σ of log per-rank
  medians), the per-iteration jitter (σ of log compute over the rank's median), and the
  ranks more than 10 % slower than the median; α and β from the service time of matched
  collectives against their bus bytes when at least two sizes were seen.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from syncpace.errors import ConfigError
from syncpace.sim.collectives import BUSBW
from syncpace.sim.engine import SimConfig


@dataclass(frozen=True)
class Calibration:
    source: str
    alpha_us: float | None = None  # per collective step
    bandwidth_gbs: float | None = None
    across_nodes: bool = True
    compute_ms: float | None = None
    jitter: float | None = None
    rank_spread: float | None = None
    slow_ranks: tuple[int, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {k.name: _plain(getattr(self, k.name)) for k in dataclasses.fields(self)}

    def apply(self, config: SimConfig) -> SimConfig:
        topo, net, wl, noise = config.topology, config.network, config.workload, config.noise
        if self.alpha_us is not None:
            key = "alpha_us" if self.across_nodes else "alpha_intra_us"
            net = dataclasses.replace(net, **{key: self.alpha_us})
        if self.bandwidth_gbs:
            key = "nic_gbs" if self.across_nodes else "intra_gbs"
            topo = dataclasses.replace(topo, **{key: self.bandwidth_gbs})
        if self.compute_ms:
            per = self.compute_ms / wl.accumulation / max(wl.fwd_ms + wl.bwd_ms, 1e-9)
            wl = dataclasses.replace(wl, fwd_ms=wl.fwd_ms * per, bwd_ms=wl.bwd_ms * per)
        changes: dict[str, Any] = {}
        if self.jitter is not None:
            changes["jitter"] = self.jitter
        if self.rank_spread is not None:
            changes["rank_spread"] = self.rank_spread
        if self.slow_ranks and all(r < topo.world_size for r in self.slow_ranks):
            changes["slow_ranks"] = self.slow_ranks
        noise = dataclasses.replace(noise, **changes)
        return config.replace(topology=topo, network=net, workload=wl, noise=noise)


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def calibrate(path: str | Path) -> Calibration:
    """From a bench file/directory or a trace directory, whichever ``path`` is."""
    p = Path(path)
    if p.is_file() or (p / "bench.json").exists():
        return from_bench(p)
    if p.is_dir():
        return from_trace(p)
    raise ConfigError(f"{p}: neither a bench.json nor a trace directory")


def from_bench(path: str | Path) -> Calibration:
    from syncpace.bench.results import load_bench

    data = load_bench(path)
    fits = data.get("fits") or {}
    op = "all_reduce" if "all_reduce" in fits else next(iter(fits), None)
    if op is None:
        raise ConfigError(f"{path}: the benchmark has no α–β fit to calibrate from")
    fit = fits[op]
    n = int(data.get("world_size") or 2)
    steps = 2 * (n - 1) if op == "all_reduce" else max(n - 1, 1)
    hosts = len(set(data.get("hosts") or [])) or 1
    alpha = fit.get("alpha_us")
    beta = fit.get("beta_gbps")
    return Calibration(
        source=f"bench:{path}",
        alpha_us=None if alpha is None else float(alpha) / steps,
        bandwidth_gbs=None if beta is None else float(beta),
        across_nodes=hosts > 1,
        notes=(f"{op} fit over {n} ranks on {hosts} host(s); α per step = α / {steps}",),
    )


def from_trace(path: str | Path) -> Calibration:
    from syncpace.analysis.metrics import compute_metrics
    from syncpace.trace.reader import load_trace

    trace = load_trace(path)
    notes: list[str] = []
    last = trace.events.group_by("rank", "step").agg(pl.col("enter_ns").max().alias("issue"))
    rs = trace.steps.join(last, on=["rank", "step"]).with_columns(
        compute=(pl.col("issue") - pl.col("start_ns")) / 1e6
    )
    rs = rs.filter(pl.col("step") > rs["step"].min(), pl.col("compute") > 0)  # skip warm-up
    cal: dict[str, Any] = {}
    if rs.height:
        per_rank = rs.group_by("rank").agg(pl.col("compute").median().alias("med")).sort("rank")
        med = float(per_rank["med"].median())  # type: ignore[arg-type]
        cal["compute_ms"] = med
        ratio = per_rank["med"].to_numpy() / med
        cal["rank_spread"] = float(np.std(np.log(ratio)))
        cal["slow_ranks"] = tuple(int(r) for r in per_rank["rank"].to_numpy()[ratio > 1.10])
        joined = rs.join(per_rank, on="rank")
        cal["jitter"] = float(
            np.std(np.log(joined["compute"].to_numpy() / joined["med"].to_numpy()))
        )
    else:
        notes.append("no step had a collective: compute not calibrated")
    metrics = compute_metrics(trace, warmup_steps=1)
    inst = metrics.instances.filter(pl.col("complete"), pl.col("service_ns") > 0)
    multi_node = len({m.get("host") for m in trace.meta.values()}) > 1
    if inst.height:
        alpha, bw = _fit(inst)
        n = int(inst["n"].max())  # type: ignore[arg-type]
        cal["alpha_us"] = None if alpha is None else alpha / max(2 * (n - 1), 1)
        cal["bandwidth_gbs"] = bw
        notes.append(f"α–β from {inst.height} collectives of up to {n} ranks")
    return Calibration(source=f"trace:{path}", across_nodes=multi_node, notes=tuple(notes), **cal)


def _fit(inst: pl.DataFrame) -> tuple[float | None, float | None]:
    """Least squares of service time (µs) on bus bytes; α None with one size only."""
    ops = inst["op"].to_list()
    n = inst["n"].to_numpy()
    factor = np.array(
        [BUSBW.get(o, lambda k: 1.0)(max(int(k), 1)) for o, k in zip(ops, n, strict=True)]
    )
    x = inst["bytes"].to_numpy() * factor
    t = inst["service_ns"].to_numpy() / 1e3
    if np.unique(inst["bytes"].to_numpy()).size < 2:
        return None, float(np.median(x / t) / 1e3)  # bytes/us -> GB/s
    design = np.column_stack([np.ones_like(x), x])
    (alpha, gamma), *_ = np.linalg.lstsq(design, t, rcond=None)
    bw = None if gamma <= 0 else 1.0 / gamma / 1e3
    return max(float(alpha), 0.0), bw
