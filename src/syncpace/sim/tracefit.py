"""Estimators of the trace calibration that read the critical path, and the one fit of
the model to it.

A synchronous iteration ends when the rank that arrived last at the synchronisation
point has been through its collectives and its optimizer step. So the trace is read on
that rank (:func:`critical_path`): per step, its arrival (the entry that ends compute,
:func:`syncpace.sim.calibrate.compute_end`), the communication after it (its last exit
minus that arrival: what the network took once everybody was there) and its optimizer
(its step end minus that exit). Nothing the other ranks waited is counted as compute or
as communication.

Distributions are kept as they were measured (:func:`quantiles`): a table of quantiles
the simulator resamples (:func:`syncpace.sim.noise.resample`), not a parametric fit a
heavy tail or a mixture of states would distort.

:func:`fit_latency` is the one parameter fitted through the model: the α per step that
makes the simulated communication after the last arrival, at the trace's own size, equal
the measured median. A α–β fit on service times alone cannot give it where the
collectives overlap one another or backward (each one's service time then includes the
others'), and without it the model's communication is whatever the two sizes' fit said.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import polars as pl

from syncpace.analysis.iterations import global_steps, rank_steps
from syncpace.sim.engine import SimConfig, simulate

#: Quantiles kept of each measured distribution (evenly spaced probabilities 0..1).
QUANTILES = 101


def quantiles(values: np.ndarray, count: int = QUANTILES) -> tuple[float, ...]:
    """``count`` quantiles of ``values`` at evenly spaced probabilities from 0 to 1."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return ()
    return tuple(float(q) for q in np.quantile(values, np.linspace(0.0, 1.0, count)))


def steady_from(events: pl.DataFrame, first: int) -> int:
    """The first step of the steady state: after ``first`` (setup, always left out), the
    first step whose collectives (op and size, on the lowest rank) are those of the
    run's most common step. A job's first steps call what it never calls again (DDP's
    parameter and buffer broadcasts, its bucket rebuild): one such step in 40 is the
    run's slowest and sets its CV, and no steady model has it."""
    ev = events.filter(pl.col("rank") == pl.col("rank").min(), pl.col("step") > first)
    if ev.height == 0:
        return first + 1
    sig = (
        ev.sort("enter_ns")
        .group_by("step")
        .agg(sig=pl.concat_str(pl.col("op"), pl.col("bytes").cast(pl.Utf8), separator=":"))
        .with_columns(pl.col("sig").list.sort().list.join(","))
    )
    modal = sig["sig"].mode().sort()[0]
    steady = sig.filter(pl.col("sig") == modal)["step"].min()
    return int(steady) if steady is not None else first + 1  # type: ignore[arg-type]


def measured_iterations(steps: pl.DataFrame, warmup: int) -> np.ndarray:
    """Global iteration times (ms) from ``warmup`` on, as the analysis measures them:
    between consecutive boundaries (the last rank's end), the first from its earliest
    start."""
    kept = steps.filter(pl.col("step") >= warmup)
    per = global_steps(rank_steps(kept))
    return per["time_ns"].to_numpy().astype(float) / 1e6


def critical_path(steps: pl.DataFrame, events: pl.DataFrame, warmup: int, end: str) -> pl.DataFrame:
    """Per step from ``warmup``: the rank that arrived last (``rank``), its arrival
    (``arrival_ns``), the communication after it (``comm_ms``) and its optimizer
    (``opt_ms``). Steps whose last rank has no observed exit are left out."""
    entry = pl.col("enter_ns").min() if end == "first" else pl.col("enter_ns").max()
    ev = events.filter(pl.col("step") >= warmup)
    per = ev.group_by("rank", "step").agg(
        arrival_ns=entry, exit_ns=pl.col("exit_ns").max(), unseen=(pl.col("exit_ns") < 0).any()
    )
    last = per.sort("arrival_ns", descending=True).group_by("step").first()
    return (
        last.join(steps.select("rank", "step", "end_ns"), on=["rank", "step"])
        .filter(~pl.col("unseen"))
        # a completion seen after the step's end (gloo's work finishing on its own
        # thread) ends the communication at the step's end
        .with_columns(done=pl.min_horizontal("exit_ns", "end_ns"))
        .with_columns(
            comm_ms=(pl.col("done") - pl.col("arrival_ns")) / 1e6,
            opt_ms=(pl.col("end_ns") - pl.col("done")) / 1e6,
        )
        .filter(pl.col("comm_ms") >= 0)
        .sort("step")
        .select("step", "rank", "arrival_ns", "comm_ms", "opt_ms")
    )


def since_exit(table: pl.DataFrame, events: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank and step of a compute ``table``: ``gap_ms``, the time from the rank's
    last exit of the step before (its end where that came first) to the entry that ends
    its compute, less what it was held in blocking calls: its optimizer and compute,
    measured from the point every rank leaves together (the end of a collective), not
    from its own step start, which moves with when it happened to end the step before."""
    done = (
        events.group_by("rank", "step")
        .agg(exit_ns=pl.col("exit_ns").max(), unseen=(pl.col("exit_ns") < 0).any())
        .join(steps.select("rank", "step", "end_ns"), on=["rank", "step"])
        .filter(~pl.col("unseen"))
        .select(
            "rank", (pl.col("step") + 1).alias("step"), prev=pl.min_horizontal("exit_ns", "end_ns")
        )
    )
    return (
        table.join(done, on=["rank", "step"])
        .with_columns(gap_ms=pl.col("compute") + (pl.col("start_ns") - pl.col("prev")) / 1e6)
        .filter(pl.col("gap_ms") > 0)
        .select("rank", "step", "gap_ms")
    )


#: Most measured steps kept per slow rank to be drawn whole (evenly spaced over the run).
STEP_ROWS = 1000


def whole_steps(
    table: pl.DataFrame,
    trace_steps: pl.DataFrame,
    events: pl.DataFrame,
    ranks: tuple[int, ...],
    times: tuple[float, float],
    end: str,
) -> tuple[float, ...]:
    """Each of ``ranks``' measured steps of a compute ``table`` as one row, flattened,
    an equal number per rank (at most :data:`STEP_ROWS`, evenly spaced): its extra time
    (its compute from its own previous end beyond the others' compute, ``times[0]``,
    never below 0), its optimizer (step end minus its last exit) beyond the modelled
    one (``times[1]``), and where the communication after its arrival stands among the
    critical path's (:func:`critical_path`, compute ending at ``end``): the probability
    at which the spread's quantiles read it, -1 where another rank arrived last. Empty
    where a rank has fewer than 2 such steps.

    Kept together because they happen together: a rank whose host is busy for a whole
    step computes, communicates and steps its optimizer late in that same step, and an
    iteration pays their sum. Drawn apart (or from the exit of the step before to the
    arrival, which pairs one step's optimizer with the next step's compute), their
    covariance is lost and the simulated iterations vary less than the measured. The
    communication is kept as a probability, not a time, so that the network's spread
    stays the one setting of its size."""
    compute_ms, opt_ms = times
    warmup = int(table["step"].min()) if table.height else 0  # type: ignore[arg-type]
    path = critical_path(trace_steps, events, warmup, end)
    last = max(path.height - 1, 1)
    comm = path.select("rank", "step", p=(pl.col("comm_ms").rank("average") - 1) / last)
    own = trace_steps.sort("rank", "step").with_columns(prev=pl.col("end_ns").shift(1).over("rank"))
    since = pl.col("compute") + (pl.col("start_ns") - pl.col("prev")) / 1e6
    rows = (
        table.select("rank", "step", "start_ns", "compute")
        .join(own.select("rank", "step", "prev"), on=["rank", "step"])
        .join(exit_to_end(trace_steps, events, warmup), on=["rank", "step"])
        .join(comm, on=["rank", "step"], how="left")
        .with_columns(
            extra=(since - compute_ms).clip(lower_bound=0.0),
            opt=pl.col("post_ms") - opt_ms,
            p=pl.col("p").fill_null(-1.0) if path.height >= 2 else pl.lit(-1.0),
        )
        .drop_nulls("extra")
        .sort("rank", "step")
    )
    per = [rows.filter(pl.col("rank") == r).select("extra", "opt", "p") for r in ranks]
    count = min([p.height for p in per] + [STEP_ROWS])
    if count < 2:
        return ()
    out: list[float] = []
    for p in per:
        keep = np.linspace(0, p.height - 1, count).round().astype(int)
        out.extend(float(v) for v in p.to_numpy()[keep].ravel())
    return tuple(out)


def exit_to_end(steps: pl.DataFrame, events: pl.DataFrame, warmup: int) -> pl.DataFrame:
    """Per rank and step from ``warmup`` (``post_ms``): from the rank's last exit (its end
    where that came first) to its step's end."""
    done = (
        events.filter(pl.col("step") >= warmup)
        .group_by("rank", "step")
        .agg(exit_ns=pl.col("exit_ns").max(), unseen=(pl.col("exit_ns") < 0).any())
        .filter(~pl.col("unseen"))
    )
    return (
        done.join(steps.select("rank", "step", "end_ns"), on=["rank", "step"])
        .with_columns(post_ms=(pl.col("end_ns") - pl.min_horizontal("exit_ns", "end_ns")) / 1e6)
        .select("rank", "step", "post_ms")
    )


def _quiet(config: SimConfig, nodes: int) -> SimConfig:
    """``config`` at ``nodes`` without randomness: the extra ranks at their medians, no
    jitter, spread, bursts or measured spread of communication; events kept."""
    noise = config.noise
    tables = noise.extra_tables()
    medians = tuple(float(np.median(t)) for t in tables)
    quiet = dataclasses.replace(
        noise,
        distribution="lognormal",
        quantiles=(),
        jitter=0.0,
        rank_spread=0.0,
        os_burst_prob=0.0,
        loader_prob=0.0,
        throttle_rate=0.0,
        post_ms=(),
        extra_ms=medians,
        extra_steps=(),
    )
    return config.replace(
        topology=dataclasses.replace(config.topology, nodes=nodes),
        noise=quiet,
        network=dataclasses.replace(config.network, service_quantiles=()),
        pacing=dataclasses.replace(config.pacing, strategy="off"),
        run=dataclasses.replace(config.run, steps=12, warmup=2, record_events=True),
    )


def simulated_comm_ms(config: SimConfig, end: str) -> float:
    """The median communication after the last arrival in a simulation of ``config``:
    the last-arriving rank's last exit minus its arrival, as :func:`critical_path`."""
    result = simulate(config)
    enter, exits = result.enter_s, result.exit_s
    assert enter is not None and exits is not None  # record_events is on
    if enter.shape[1] == 0:
        return 0.0
    arrival = enter[:, -1 if end == "last" else 0, :]
    last = arrival.argmax(axis=1)
    rows = np.arange(arrival.shape[0])
    comm = exits[rows, :, last].max(axis=1) - arrival[rows, last]
    return float(np.median(comm[config.run.warmup :])) * 1e3


def fit_latency(
    config: SimConfig, nodes: int, comm_ms: float, end: str, across: bool
) -> tuple[SimConfig, str]:
    """``config`` with the α per step (across nodes, or inside one when ``across`` is
    false) that makes the simulated communication after the last arrival at ``nodes``
    equal ``comm_ms``, and a note. It grows with α, so bisection finds it. Where the
    bandwidth alone already takes longer (a β from service times that include queueing
    or another collective's bytes), α is 0 and the bandwidth is raised until it fits:
    the critical path is what the iteration pays."""
    alpha_key = "alpha_us" if across else "alpha_intra_us"
    rate_key = "nic_gbps" if across else "intra_gbps"
    quiet = _quiet(config, nodes)
    rate = getattr(quiet.topology, rate_key)

    def comm(alpha: float, scale: float = 1.0) -> float:
        net = dataclasses.replace(quiet.network, **{alpha_key: alpha})
        topo = dataclasses.replace(quiet.topology, **{rate_key: rate * scale})
        return simulated_comm_ms(quiet.replace(network=net, topology=topo), end)

    scale = 1.0
    if comm(0.0) >= comm_ms:
        alpha = 0.0
        cap = min(1e4, 1e6 / rate)  # the rate's own bound; past it the floor is not β
        scale = _bisect(lambda x: -comm(0.0, x), -comm_ms, 1.0, cap, log=True, cap=cap)
        note = (
            f"α 0 and the bandwidth x{scale:.3g}: the measured bandwidth alone gave more "
            f"than the {comm_ms:.2f} ms after the last arrival"
        )
    else:
        alpha = _bisect(comm, comm_ms, 0.0, max(comm_ms * 1e3, 1.0), cap=1e7)
        note = (
            f"α {alpha:.1f} µs per step: the simulated communication after the last "
            f"arrival at {nodes} nodes is the measured {comm_ms:.2f} ms"
        )
    network = dataclasses.replace(config.network, **{alpha_key: alpha})
    topology = dataclasses.replace(config.topology, **{rate_key: rate * scale})
    return config.replace(network=network, topology=topology), note


def _bisect(
    f: Callable[[float], float],
    target: float,
    low: float,
    high: float,
    *,
    cap: float,
    log: bool = False,
) -> float:
    """x in [low, cap] with f(x) = target for a non-decreasing f, ``cap`` where f stays
    below it: ``high`` doubled until f reaches the target, then 40 halvings (geometric
    with ``log``)."""
    high = min(high, cap)
    while f(high) < target and high < cap:
        high = min(high * 2, cap)
    if f(high) < target:
        return cap
    for _ in range(40):
        mid = (low * high) ** 0.5 if log else (low + high) / 2
        low, high = (mid, high) if f(mid) < target else (low, mid)
    return (low * high) ** 0.5 if log else (low + high) / 2
