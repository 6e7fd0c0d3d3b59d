"""Calibration: α, β and compute-noise parameters from ``syncpace bench`` or a real trace.

* **bench** (``bench.json`` or its run directory): the all-reduce α–β fit
  (``time = α + bus_factor·size/β``). ``α`` is the whole collective's latency; a ring
  pays it in ``2(n-1)`` steps, so the per-step α is ``α / (2(n-1))``. ``β`` is a bus
  bandwidth, i.e. the per-rank link rate of the flat α–β model: it becomes the NIC rate
  when the benchmark spanned several hosts, the intra-node rate otherwise.
* **trace** (a run directory): per rank and iteration, compute = the entry of the
  collective that ends compute minus the step start (:func:`compute_end` decides which,
  once per trace: the *first* collective when a rank issues its collectives back to
  back, each blocking until done; the *last* when they overlap one another or compute,
  as DDP's buckets do, the last one issued at the end of backward). From the per-rank
  medians (:func:`compute_profile`): a rank is slow when its median is more than 10 %
  above the median of all ranks *and* it is slower in most steps (its lower quartile
  above the upper quartile of the ranks that are not), so CPU contention on a loaded
  machine, which moves every rank's compute about, is not read as a rank property. The
  median of the other ranks is the compute time; their compute over their own median,
  pooled, is the jitter, kept as measured quantiles (``quantiles``); each slow rank's
  compute minus that time is its extra time, kept as its own quantiles
  (``slow_extra_ms``), added before its compute: its backward and optimizer keep the
  others' pace, as a trace shows for a rank held back before its step. Each slow
  rank's measured steps are also kept whole (``slow_steps``: its extra time, its
  optimizer and the communication after its arrival in the same step), and the
  simulator draws them as they came, so that a host busy for a whole step slows all
  three together as it did in the trace. The
  communication is read on the critical path (:mod:`syncpace.sim.tracefit`): the
  median time from the last arrival to the last rank's exit (``comm_ms``, matched
  through the model by α), the spread of that time (``service_quantiles``) and the last
  rank's optimizer (``opt_ms``). β comes from the service time of matched collectives
  against their bus bytes when at least two sizes show it; where they do not, the
  highest bus rate seen. The trace's own iteration times (``measured_ms``,
  ``measured_cv``) are kept for the replay check (:mod:`syncpace.sim.check`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from syncpace.analysis.metrics import compute_metrics
from syncpace.bench.results import load_bench, main_fit
from syncpace.errors import ConfigError
from syncpace.sim.engine import SimConfig
from syncpace.sim.tracefit import (
    critical_path,
    exit_to_end,
    fit_latency,
    measured_iterations,
    quantiles,
    since_exit,
    steady_from,
    whole_steps,
)
from syncpace.trace.busbw import bus_factor
from syncpace.trace.reader import load_trace


@dataclass(frozen=True)
class Calibration:
    source: str
    alpha_us: float | None = None  # per collective step
    bandwidth_gbps: float | None = None
    across_nodes: bool = True
    compute_ms: float | None = None
    jitter: float | None = None
    rank_spread: float | None = None
    slow_ranks: tuple[int, ...] = ()
    slow_factor: float | None = None  # measured compute factor of the slow ranks
    slow_factors: tuple[float, ...] = ()  # each slow rank's own factor, same order
    notes: tuple[str, ...] = field(default=())
    # from a trace: the measured distributions the simulator resamples
    quantiles: tuple[float, ...] = ()  # compute over the rank's median, non-slow ranks
    slow_extra_ms: tuple[float, ...] = ()  # each slow rank's extra time's quantiles, in order
    # each slow rank's measured steps, drawn whole: extra ms, optimizer beyond opt_ms,
    # the communication's probability in service_quantiles (-1: it was not last)
    slow_steps: tuple[float, ...] = ()
    comm_ms: float | None = None  # median communication after the last arrival
    service_quantiles: tuple[float, ...] = ()  # that communication over its median
    opt_ms: float | None = None  # the last rank's optimizer step, median
    post_ms: tuple[float, ...] = ()  # the other ranks' exit to step end beyond opt_ms
    end: str = "last"  # which collective's entry ends compute
    world_size: int = 0  # the traced job's ranks (0: not from a trace)
    measured_ms: float | None = None  # the trace's mean iteration time
    measured_cv: float | None = None  # and its coefficient of variation

    def to_json(self) -> dict[str, Any]:
        return {k.name: _plain(getattr(self, k.name)) for k in dataclasses.fields(self)}

    def apply(self, config: SimConfig) -> SimConfig:
        topo, net, wl, noise = config.topology, config.network, config.workload, config.noise
        if self.alpha_us is not None:
            key = "alpha_us" if self.across_nodes else "alpha_intra_us"
            net = dataclasses.replace(net, **{key: self.alpha_us})
        if self.bandwidth_gbps:
            key = "nic_gbps" if self.across_nodes else "intra_gbps"
            topo = dataclasses.replace(topo, **{key: self.bandwidth_gbps})
        if self.compute_ms:
            per = self.compute_ms / wl.accumulation / max(wl.fwd_ms + wl.bwd_ms, 1e-9)
            wl = dataclasses.replace(wl, fwd_ms=wl.fwd_ms * per, bwd_ms=wl.bwd_ms * per)
        if self.opt_ms is not None:
            # collectives back to back after compute are issued together at its end
            wl = dataclasses.replace(wl, opt_ms=self.opt_ms, overlap=self.end == "last")
        if self.service_quantiles:
            net = dataclasses.replace(net, service_quantiles=self.service_quantiles)
        noise = dataclasses.replace(noise, **self._noise(topo.world_size))
        out = config.replace(topology=topo, network=net, workload=wl, noise=noise)
        if self.comm_ms is None or not self.world_size:
            return out
        gpus = out.topology.gpus_per_node
        if self.world_size % gpus:
            return out  # the replay check says why it cannot run
        nodes = self.world_size // gpus
        out, _ = fit_latency(out, nodes, self.comm_ms, self.end, self.across_nodes)
        return out

    def _noise(self, world: int) -> dict[str, Any]:
        changes: dict[str, Any] = {}
        if self.jitter is not None:
            changes["jitter"] = self.jitter
        if self.quantiles:
            # the trace measured every rank: a scenario's slow ranks and nodes would
            # count the measured slowness twice
            changes.update(
                distribution="empirical",
                quantiles=self.quantiles,
                post_ms=self.post_ms,
                slow_ranks=(),
                slow_factors=(),
                slow_nodes=(),
            )
        if self.rank_spread is not None:
            changes["rank_spread"] = self.rank_spread
        if not self.slow_ranks or not all(r < world for r in self.slow_ranks):
            return changes
        if self.slow_extra_ms:
            changes.update(
                extra_ranks=self.slow_ranks,
                extra_ms=self.slow_extra_ms,
                extra_steps=self.slow_steps,
            )
            return changes
        changes["slow_ranks"] = self.slow_ranks
        if self.slow_factor is not None:
            changes["slow_factor"] = self.slow_factor
        if len(self.slow_factors) == len(self.slow_ranks):
            changes["slow_factors"] = self.slow_factors
        return changes


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

    data = load_bench(path)
    chosen = main_fit(data)
    if chosen is None:
        raise ConfigError(f"{path}: the benchmark has no α–β fit to calibrate from")
    op, fit = chosen
    n = int(data.get("world_size") or 2)
    steps = 2 * (n - 1) if op == "all_reduce" else max(n - 1, 1)
    hosts = len(set(data.get("hosts") or [])) or 1
    alpha = fit.get("alpha_us")
    beta = fit.get("beta_gbps")
    return Calibration(
        source=f"bench:{path}",
        alpha_us=None if alpha is None else float(alpha) / steps,
        bandwidth_gbps=None if beta is None else float(beta),
        across_nodes=hosts > 1,
        notes=(f"{op} fit over {n} ranks on {hosts} host(s); α per step = α / {steps}",),
    )


def from_trace(path: str | Path) -> Calibration:

    trace = load_trace(path)
    notes: list[str] = []
    cal: dict[str, Any] = {}
    # the warm-up (connection setup, DDP's bucket rebuild and first broadcasts) is left out
    first = int(trace.steps["step"].min()) if trace.steps.height else 0  # type: ignore[arg-type]
    warmup = steady_from(trace.events, first)
    if warmup > first + 1:
        notes.append(
            f"steps {first}-{warmup - 1} left out: their collectives are not the steady ones"
        )
    end, why = compute_end(trace.events, warmup)
    table = compute_table(trace.steps, trace.events, warmup, end=end)
    if table.height:
        cal.update(_compute(table, notes))
        notes.append(why)
    else:
        notes.append("no step had a collective: compute not calibrated")
    cal.update(_critical(trace.steps, trace.events, warmup, end, notes))
    if cal.get("slow_ranks") and "opt_ms" in cal:
        cal["slow_extra_ms"] = _extra(table, trace, cal)
        cal["slow_steps"] = whole_steps(
            table,
            trace.steps,
            trace.events,
            cal["slow_ranks"],
            (cal["compute_ms"], cal["opt_ms"]),
            end,
        )
    if "opt_ms" in cal:
        cal["post_ms"] = _post(trace, warmup, cal)
    metrics = compute_metrics(trace, warmup_steps=1)
    inst = metrics.instances.filter(pl.col("complete"), pl.col("service_ns") > 0)
    multi_node = len({m.get("host") for m in trace.meta.values()}) > 1
    if inst.height:
        alpha, bw = _fit(inst)
        n = int(inst["n"].max())  # type: ignore[arg-type]
        if bw is None:
            bw = _highest_rate(inst)
            notes.append("no size dependence in the service times: β the highest rate seen")
        cal["alpha_us"] = None if alpha is None else alpha / max(2 * (n - 1), 1)
        cal["bandwidth_gbps"] = bw
        notes.append(f"α–β from {inst.height} collectives of up to {n} ranks")
    iters = measured_iterations(trace.steps, warmup)
    if iters.size >= 2 and iters.mean() > 0:
        cal.update(
            measured_ms=float(iters.mean()), measured_cv=float(iters.std(ddof=1) / iters.mean())
        )
    world = int(trace.steps["rank"].n_unique()) if trace.steps.height else 0
    return Calibration(
        source=f"trace:{path}",
        across_nodes=multi_node,
        notes=tuple(notes),
        end=end,
        world_size=world,
        **cal,
    )


def _compute(table: pl.DataFrame, notes: list[str]) -> dict[str, Any]:
    prof = compute_profile(table)
    if prof.slow_ranks:
        pairs = zip(prof.slow_ranks, prof.slow_factors, strict=True)
        each = ", ".join(f"{r} x{f:.3f}" for r, f in pairs)
        notes.append(f"slow ranks (compute over the others'): {each}")
    return {
        "compute_ms": prof.compute_ms,
        "jitter": prof.jitter,
        "rank_spread": prof.rank_spread,
        "slow_ranks": prof.slow_ranks,
        "slow_factor": prof.slow_factor if prof.slow_ranks else None,
        "slow_factors": prof.slow_factors,
        "quantiles": prof.quantiles,
        "slow_extra_ms": prof.slow_extra_ms,
    }


def _critical(
    steps: pl.DataFrame, events: pl.DataFrame, warmup: int, end: str, notes: list[str]
) -> dict[str, Any]:
    path = critical_path(steps, events, warmup, end)
    if path.height < 2:
        notes.append("fewer than 2 steps with the last rank's exit seen: communication not read")
        return {}
    comm = path["comm_ms"].to_numpy()
    median = float(np.median(comm))
    spread = quantiles(comm / median) if median > 0 else ()
    notes.append(
        f"communication after the last arrival: median {median:.2f} ms over {path.height} steps"
    )
    return {
        "comm_ms": median,
        "service_quantiles": spread,
        "opt_ms": float(np.median(path["opt_ms"].to_numpy())),
    }


def _extra(table: pl.DataFrame, trace: Any, cal: dict[str, Any]) -> tuple[float, ...]:
    """Each slow rank's extra time's quantiles, from the exit it left with the others
    to its arrival (:func:`~syncpace.sim.tracefit.since_exit`), less the optimizer and
    the others' compute the simulation puts in that time; its compute minus the
    others' where it has no such gap."""
    gaps = since_exit(table, trace.events, trace.steps)
    out: list[float] = []
    rest, opt = cal["compute_ms"], cal["opt_ms"]
    for r in cal["slow_ranks"]:
        own = gaps.filter(pl.col("rank") == r)["gap_ms"].to_numpy() - opt
        if own.size < 2:
            own = table.filter(pl.col("rank") == r)["compute"].to_numpy()
        out.extend(quantiles(np.maximum(own - rest, 0.0)))
    return tuple(out)


def _post(trace: Any, warmup: int, cal: dict[str, Any]) -> tuple[float, ...]:
    """Quantiles of the time from a rank's last exit to its step's end beyond the
    optimizer, over the ranks that are not slow: on a loaded machine a rank descheduled
    after the exit holds the iteration's boundary back as surely as the network."""
    post = exit_to_end(trace.steps, trace.events, warmup)
    slow = pl.Series(list(cal.get("slow_ranks", ())), dtype=post["rank"].dtype)
    post = post.filter(~pl.col("rank").is_in(slow.implode()))
    return quantiles(post["post_ms"].to_numpy() - cal["opt_ms"])


def _highest_rate(inst: pl.DataFrame) -> float | None:
    """The highest bus rate (GB/s) any matched collective reached: with no size
    dependence to fit, what the network did at least."""
    ops = inst["op"].to_list()
    n = inst["n"].to_numpy()
    factor = np.array([bus_factor(o, max(int(k), 1)) or 1.0 for o, k in zip(ops, n, strict=True)])
    rate = inst["bytes"].to_numpy() * factor / inst["service_ns"].to_numpy()
    best = float(rate.max()) if rate.size else 0.0
    return best if best > 0 else None


# Compute from a trace, shared with the validation (``syncpace.validate.model``).

#: A rank whose median compute is more than this times the median of all ranks is slow.
SLOW_RATIO = 1.10
#: Collectives are back to back when the idle time between them is at most this share
#: of the time from the first one's entry to the last one's.
IDLE_SHARE = 0.10


@dataclass(frozen=True)
class ComputeProfile:
    compute_ms: float  # median of the non-slow ranks' medians
    jitter: float  # σ of log(compute / the rank's median), every rank
    rank_spread: float  # σ of log of the non-slow ranks' medians
    slow_ranks: tuple[int, ...]
    slow_factor: float  # mean slow-rank median over the others' median; 1.0 without any
    slow_factors: tuple[float, ...] = ()  # each slow rank's median over the others'
    quantiles: tuple[float, ...] = ()  # compute over the rank's median, non-slow ranks pooled
    slow_extra_ms: tuple[float, ...] = ()  # each slow rank's compute minus compute_ms


def compute_end(events: pl.DataFrame, warmup: int = 0) -> tuple[str, str]:
    """Which collective's entry ends compute in this trace: ``"first"`` or ``"last"``.

    Per rank and step with at least two collectives (in entry order), the step is *back
    to back* when every collective after the first was entered at or after the
    previous one's exit (an unobserved exit, ``-1``, is no such evidence) and the idle
    time between them adds up to at most :data:`IDLE_SHARE` of the time from the first
    entry to the last: a job that computes, then issues blocking collectives one after
    another. The first collective's entry ends its compute. DDP's buckets are issued
    during backward, several in flight at once (entries before earlier exits), or, on a
    fast network, each done before backward has produced the next (idle gaps of
    compute between them): the last entry ends compute. The majority of the rank-steps
    decides, a tie going to ``"last"``; with one collective per step the two agree.
    Returns the choice and a note saying why.
    """
    ev = events.filter(pl.col("step") >= warmup).sort("rank", "step", "enter_ns", "seq")
    ev = ev.with_columns(prev_exit=pl.col("exit_ns").shift(1).over("rank", "step"))
    ev = ev.with_columns(gap=pl.col("enter_ns") - pl.col("prev_exit"))
    per = (
        ev.group_by("rank", "step")
        .agg(
            n=pl.len(),
            after=((pl.col("prev_exit") >= 0) & (pl.col("gap") >= 0)).drop_nulls().all(),
            idle=pl.col("gap").sum(),
            span=pl.col("enter_ns").max() - pl.col("enter_ns").min(),
        )
        .filter(pl.col("n") >= 2)
    )
    if per.height == 0:
        return "last", "compute ends at the step's collective (one per step)"
    back = per.filter(pl.col("after"), pl.col("idle") <= IDLE_SHARE * pl.col("span")).height
    share = f"{back} of {per.height} rank-steps issue their collectives back to back"
    if 2 * back > per.height:
        return "first", f"compute ends at the first collective's entry: {share}"
    return "last", f"compute ends at the last collective's entry: {share}"


def compute_table(
    steps: pl.DataFrame, events: pl.DataFrame, warmup: int, end: str = "first"
) -> pl.DataFrame:
    """Per rank and step: compute = the ``end`` (first/last) collective's entry − step
    start (ms), less what the rank waited for others in the step's earlier collectives
    (:func:`waited`); steps before ``warmup`` and without a collective are left out."""
    if end not in ("first", "last"):
        raise ValueError(f"end must be 'first' or 'last', got {end!r}")
    entry = pl.col("enter_ns").min() if end == "first" else pl.col("enter_ns").max()
    issue = events.group_by("rank", "step").agg(entry.alias("issue"))
    table = steps.join(issue, on=["rank", "step"])
    if end == "last":
        table = table.join(waited(events, table), on=["rank", "step"], how="left")
    else:
        table = table.with_columns(waited_ns=pl.lit(0))
    return (
        table.with_columns(
            compute=(pl.col("issue") - pl.col("start_ns") - pl.col("waited_ns").fill_null(0)) / 1e6
        )
        .drop("waited_ns")
        .filter(pl.col("step") >= warmup, pl.col("compute") > 0)
    )


def waited(events: pl.DataFrame, issues: pl.DataFrame) -> pl.DataFrame:
    """Per rank and step (``waited_ns``): the time the rank was held, before its
    ``issue`` (the entry that ends compute), in a call it waited on (``wait_ns`` set: a
    broadcast, a barrier) until the last rank entered that call: the others' compute,
    not its own. A call nobody waited on (DDP's buckets, completed by callback) held
    nothing: the rank computed on."""
    last = events.group_by("group", "seq").agg(last_enter=pl.col("enter_ns").max())
    ev = events.join(last, on=["group", "seq"]).join(
        issues.select("rank", "step", "issue"), on=["rank", "step"]
    )
    held = ev.filter(
        pl.col("wait_ns") >= 0,
        pl.col("enter_ns") < pl.col("issue"),
        pl.col("exit_ns") >= 0,
        pl.col("exit_ns") <= pl.col("issue"),
    )
    since = pl.max_horizontal("wait_ns", "enter_ns")
    wait = pl.min_horizontal("last_enter", "exit_ns") - since
    return held.group_by("rank", "step").agg(waited_ns=wait.clip(lower_bound=0).sum())


def compute_profile(table: pl.DataFrame) -> ComputeProfile:
    """The compute statistics of a :func:`compute_table` (see the module docstring)."""
    if table.height == 0:
        raise ConfigError("no step with a collective after warm-up: cannot calibrate compute")
    per = (
        table.group_by("rank")
        .agg(
            med=pl.col("compute").median(),
            q25=pl.col("compute").quantile(0.25, "linear"),
        )
        .sort("rank")
    )
    meds = per["med"].to_numpy()
    candidate = meds / np.median(meds) > SLOW_RATIO
    typical_ranks = per["rank"].filter(~pl.Series(candidate)).implode()
    typical = table.filter(pl.col("rank").is_in(typical_ranks))
    upper = float(typical["compute"].quantile(0.75, "linear") or 0.0)
    # slower in most steps, not in the median only: CPU contention moves every rank
    slow = candidate & (per["q25"].to_numpy() > upper)
    rest = float(np.median(meds[~slow]))
    joined = table.join(per, on="rank")
    ratio = joined["compute"].to_numpy() / joined["med"].to_numpy()
    is_slow = np.isin(joined["rank"].to_numpy(), per["rank"].to_numpy()[slow])
    slow_ranks = tuple(int(r) for r in per["rank"].to_numpy()[slow])
    extra: list[float] = []
    for r in slow_ranks:
        own = table.filter(pl.col("rank") == r)["compute"].to_numpy()
        extra.extend(quantiles(np.maximum(own - rest, 0.0)))
    return ComputeProfile(
        compute_ms=rest,
        jitter=float(np.std(np.log(ratio[~is_slow]))),
        rank_spread=float(np.std(np.log(meds[~slow] / rest))),
        slow_ranks=slow_ranks,
        slow_factor=float(meds[slow].mean() / rest) if slow.any() else 1.0,
        slow_factors=tuple(float(m / rest) for m in meds[slow]),
        quantiles=quantiles(ratio[~is_slow]),
        slow_extra_ms=tuple(extra),
    )


def _fit(inst: pl.DataFrame) -> tuple[float | None, float | None]:
    """α (µs) and β (GB/s): least squares of service time on bus bytes, in absolute
    time (what an iteration adds up: a trace's few large collectives matter more than
    its many small ones, whose service time in a busy job is mostly noise). A negative
    intercept is refitted through the origin, not clamped with the steeper slope kept
    (that made β too low). α None with one size only."""
    ops = inst["op"].to_list()
    n = inst["n"].to_numpy()
    factor = np.array([bus_factor(o, max(int(k), 1)) or 1.0 for o, k in zip(ops, n, strict=True)])
    x = inst["bytes"].to_numpy() * factor
    t = inst["service_ns"].to_numpy() / 1e3
    if np.unique(inst["bytes"].to_numpy()).size < 2:
        return None, float(np.median(x / t) / 1e3)  # bytes/us -> GB/s
    design = np.column_stack([np.ones_like(x), x])
    (alpha, gamma), *_ = np.linalg.lstsq(design, t, rcond=None)
    if alpha < 0:
        alpha, gamma = 0.0, float(np.sum(x * t) / np.sum(x * x))
    bw = None if gamma <= 0 else 1.0 / gamma / 1e3
    return float(alpha), bw
