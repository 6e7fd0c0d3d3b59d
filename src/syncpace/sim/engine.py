"""The simulation loop: iterations of DDP-like steps on a simulated cluster.

Per iteration, vectorised over ranks: each rank's device starts where its previous step
ended (plus the pacer's delay when it is placed on the device) or, if later, once its
host has issued the step (:mod:`syncpace.sim.host`: the host may run a few steps ahead,
and sleeps the delay when it is placed there), computes (noise, far-GPU
penalty, neighbours' interference), issues its buckets during its last backward, and
each bucket's collective runs once its last rank has issued it and the previous one is
done (one stream). Every rank sees the collective end at the same time plus a few µs of
completion jitter: in a ring with ``2(n-1) >= n - 1`` steps the per-rank recurrence
``t[r, k] = max(t[r, k-1], t[r-1, k-1]) + step`` makes every rank finish one full
transfer after the last arrival (see :func:`ring_exits`). The optimizer follows; the
pacer (:class:`~syncpace.control.pacer.Pacer`, the object the live controller runs:
policy, lag and A/B guard) sees each rank's arrival at the synchronisation point and
answers with delays for the step ``lag`` steps later.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from syncpace.config import check_numbers, setting
from syncpace.control.config import PacingConfig
from syncpace.control.pacer import Pacer
from syncpace.errors import ConfigError
from syncpace.sim.analytical import AnalyticalNetwork
from syncpace.sim.collectives import plan
from syncpace.sim.flownet import FlowNetwork
from syncpace.sim.host import delay_shift, device_begin, host_times, issue_start
from syncpace.sim.interference import InterferenceSpec, stretch
from syncpace.sim.network import NetworkSpec
from syncpace.sim.noise import NoiseDraw, NoiseSpec, draw, quantile_at, resample
from syncpace.sim.packet.net import PacketNetwork
from syncpace.sim.tierpick import TierChoice, resolve
from syncpace.sim.topology import Topology, TopologySpec
from syncpace.sim.workload import WorkloadSpec


@dataclass(kw_only=True, slots=True)
class RunSpec:
    steps: int = setting(200, "Iterations to simulate.")
    seed: int = setting(0, "Seed of every random draw (noise, placement, traffic).")
    warmup: int = setting(10, "Iterations left out of the summary statistics.")
    record_events: bool = setting(True, "Keep per-rank collective times (needed for traces).")

    def __post_init__(self) -> None:
        check_numbers(self, steps="[1, 10000000]", seed="[0, 1e18]", warmup="[0, 10000000]")
        if self.warmup >= self.steps:
            raise ConfigError(f"need warmup < steps, got {self.warmup} and {self.steps}")


@dataclass(kw_only=True)
class SimConfig:
    """Everything one simulated run depends on."""

    name: str = "sim"
    topology: TopologySpec = field(default_factory=TopologySpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    noise: NoiseSpec = field(default_factory=NoiseSpec)
    network: NetworkSpec = field(default_factory=NetworkSpec)
    interference: InterferenceSpec = field(default_factory=InterferenceSpec)
    pacing: PacingConfig = field(default_factory=PacingConfig)
    run: RunSpec = field(default_factory=RunSpec)

    def replace(self, **sections: Any) -> SimConfig:
        return dataclasses.replace(self, **sections)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                out[f.name] = {
                    k.name: _plain(getattr(value, k.name)) for k in dataclasses.fields(value)
                }
        return out


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


@dataclass(frozen=True)
class SimResult:
    config: SimConfig
    topology: Topology
    start_s: np.ndarray  # (I, R) step starts (device: the previous step's end)
    end_s: np.ndarray  # (I, R) step ends (device)
    delay_s: np.ndarray  # (I, R) pacing delay of that step (placed as workload.pacing_on)
    enter_s: np.ndarray | None  # (I, K, R) bucket issue times (device)
    exit_s: np.ndarray | None  # (I, K, R) bucket completion times (device)
    bucket_bytes: np.ndarray  # (K,)
    comm_s: np.ndarray  # (I, K) collective durations
    pacing_active: np.ndarray  # (I,) bool: the policy paced and the A/B guard let it
    host_start_s: np.ndarray  # (I, R) when the host could start issuing the step
    host_s: np.ndarray  # (I, R) the host's time to issue the step (without a delay)
    run_ahead_s: np.ndarray  # (I, R) device begin minus h_i: how long the issued step queued
    ab_state: str | None = None  # the A/B guard's state at the end (None: not paced)
    tier_choice: TierChoice | None = None  # what tier = "auto" picked, and why

    @property
    def world_size(self) -> int:
        return self.start_s.shape[1]

    def iteration_s(self) -> np.ndarray:
        """Global iteration times: between consecutive boundaries (the last rank's end)."""
        bound = self.end_s.max(axis=1)
        first = self.start_s[0].min()
        return np.diff(np.r_[first, bound])

    def summary(self) -> dict[str, float]:
        it = self.iteration_s()[self.config.run.warmup :]
        mean = float(it.mean())
        samples = self.world_size * self.config.workload.samples_per_rank
        return {
            "world_size": self.world_size,
            "nodes": self.config.topology.nodes,
            "iteration_ms": mean * 1e3,
            "cv": float(it.std() / mean) if mean > 0 else 0.0,
            "p50_ms": float(np.percentile(it, 50)) * 1e3,
            "p99_ms": float(np.percentile(it, 99)) * 1e3,
            "throughput": samples / mean if mean > 0 else 0.0,
            "comm_ms": float(self.comm_s[self.config.run.warmup :].sum(axis=1).mean()) * 1e3,
            "pacing_on_share": float(self.pacing_active[self.config.run.warmup :].mean()),
            "run_ahead_ms": float(self.run_ahead_s[self.config.run.warmup :].mean()) * 1e3,
        }

    def host_delay_s(self) -> np.ndarray:
        """(I, R) the part of the pacing delay slept on the host (the rest is on the
        device's stream)."""
        on_host = self.config.workload.pacing_on == "host"
        return self.delay_s if on_host else np.zeros_like(self.delay_s)

    def host_end_s(self) -> np.ndarray:
        """(I, R) ``h_i``: when the host had issued all of the step."""
        return self.host_start_s + self.host_s + self.host_delay_s()

    def host_calls_s(self) -> tuple[np.ndarray, np.ndarray]:
        """(I, K, R) each bucket's issue on the host and when the host saw it through:
        at its place in the host's issue of the step (the delay, slept before the first
        collective, precedes every bucket), and at the end of backward's issue, where
        DDP waits on its buckets (on a GPU that wait returns once the stream is made to
        wait, not when the device is done)."""
        positions, backward_end = self.config.workload.host_positions()
        first = self.host_start_s + self.host_delay_s()
        enter = first[:, None, :] + self.host_s[:, None, :] * positions[None, :, None]
        seen = first + self.host_s * backward_end
        return enter, np.broadcast_to(seen[:, None, :], enter.shape)


def ring_exits(starts: np.ndarray, step_s: float, steps: int) -> np.ndarray:
    """Per-rank end of a ring of ``steps`` steps by the recurrence
    ``t[r, k] = max(t[r, k-1], t[r-1, k-1]) + step``, in closed form: rank r ends at
    ``steps * step`` after the latest start among the ``steps + 1`` ranks before it."""
    n = starts.size
    window = min(steps, n - 1)
    if window >= n - 1:
        return np.full(n, starts.max() + steps * step_s)
    best = starts.copy()
    for j in range(1, window + 1):
        best = np.maximum(best, np.roll(starts, j))
    return best + steps * step_s


def array_bytes(cfg: SimConfig) -> int:
    """About what :func:`simulate` holds in arrays: ten (steps x ranks) tables, and two
    (steps x buckets x ranks) when events are recorded."""
    steps, ranks = cfg.run.steps, cfg.topology.world_size
    buckets = int(np.ceil(cfg.workload.model_mb / cfg.workload.bucket_mb - 1e-9))
    per_step = 10 * ranks + buckets + (2 * buckets * ranks if cfg.run.record_events else 0)
    return 8 * steps * per_step


def memory_limit() -> int:
    """Half of this machine's memory: the most a simulation may plan to use."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError):
        return 8 << 30


def check_size(cfg: SimConfig) -> None:
    """Refuse, before allocating, a simulation too large for this machine."""
    need, limit = array_bytes(cfg), memory_limit()
    if need > limit:
        raise ConfigError(
            f"{cfg.name}: {cfg.run.steps} steps x {cfg.topology.world_size} ranks need about "
            f"{need / 2**30:,.1f} GiB of arrays, more than the {limit / 2**30:,.1f} GiB allowed "
            "here; lower run.steps or the node count, or set run.record_events = false"
        )


def simulate(cfg: SimConfig, progress: Any = None) -> SimResult:
    """Run ``cfg``; a configuration too large for memory is refused, not attempted.
    ``tier = "auto"`` is settled first (:mod:`syncpace.sim.tierpick`): the result's
    config names the tier that ran and ``tier_choice`` says why."""
    check_size(cfg)
    cfg, choice = resolve(cfg)
    try:
        return dataclasses.replace(_simulate(cfg, progress), tier_choice=choice)
    except MemoryError:
        raise ConfigError(
            f"{cfg.name}: out of memory simulating {cfg.run.steps} steps x "
            f"{cfg.topology.world_size} ranks; lower run.steps or the node count"
        ) from None


def _service_spread(net: NetworkSpec, iterations: int, seed: int) -> np.ndarray:
    """(I,) each iteration's multiplier of its collectives' times: draws from the measured
    ``service_quantiles`` on a seed stream of their own, so that turning them on leaves
    every other draw unchanged; ones without them."""
    if not net.service_quantiles:
        return np.ones(iterations)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 505]))
    return resample(rng, np.asarray(net.service_quantiles), (iterations,))


def _iteration_spread(
    noise: NoiseDraw, net: NetworkSpec, drawn: float, i: int, ready: np.ndarray
) -> float:
    """Iteration ``i``'s multiplier of its collectives' times: where its last-arriving
    rank drew a measured step whole, the network's spread read where that step's
    communication stood in it (measured after that rank's arrival, in the same step),
    else the network's own draw."""
    if noise.service_p is None or not net.service_quantiles:
        return drawn
    p = noise.service_p[i, int(np.argmax(ready))]
    return drawn if np.isnan(p) else float(quantile_at(np.asarray(net.service_quantiles), p))


def _simulate(cfg: SimConfig, progress: Any) -> SimResult:
    topo_spec, wl, run = cfg.topology, cfg.workload, cfg.run
    topo = Topology(topo_spec, seed=run.seed)
    iters, gpus, world = run.steps, topo_spec.gpus_per_node, topo_spec.world_size
    sizes = wl.bucket_bytes()
    ranks = np.arange(world)
    plans = [plan(wl.op, cfg.network.algorithm, int(b), ranks, gpus) for b in sizes]
    noise = draw(cfg.noise, iters, topo_spec.nodes, gpus, run.seed)
    far = np.tile(topo.far, topo_spec.nodes) * topo_spec.far_compute_penalty
    if cfg.network.tier == "analytical":
        comm = AnalyticalNetwork(topo, cfg.network, iters, run.seed).durations(plans)
        flow = None
    else:
        comm = np.zeros((iters, sizes.size))
        flow = (
            PacketNetwork(
                topo, cfg.network, run.seed, idle_s=wl.compute_s + wl.opt_ms * 1e-3, step=plans
            )
            if cfg.network.tier == "packet"
            else FlowNetwork(topo, cfg.network, run.seed)
        )
    service = _service_spread(cfg.network, iters, run.seed)
    pacer = Pacer(cfg.pacing, world) if cfg.pacing.paced else None
    rng = np.random.default_rng(np.random.SeedSequence([run.seed, 303]))
    frac = wl.ready_fraction()
    bwd_last = wl.bwd_ms * 1e-3
    start = np.zeros((iters, world))
    end = np.zeros((iters, world))
    delay_s = np.zeros((iters, world))
    active = np.zeros(iters, dtype=bool)
    record = run.record_events
    enter = np.zeros((iters, sizes.size, world)) if record else None
    exits = np.zeros((iters, sizes.size, world)) if record else None
    host = host_times(wl, iters, world, run.seed)
    host_start = np.zeros((iters, world))
    run_ahead = np.zeros((iters, world))
    on_host = wl.pacing_on == "host"
    prev_end = np.zeros(world)
    prev_host_end = np.zeros(world)
    prev_bound = 0.0
    no_delay = np.zeros(world)
    jitter = cfg.network.exit_jitter_us * 1e-6
    for i in range(iters):
        scheduled = pacer.delays_for(i)[0] if pacer is not None else None
        delay = no_delay if scheduled is None else scheduled
        work = wl.compute_s * noise.mult[i] * (1.0 + far) + noise.stall_s[i]
        if noise.compute_only is not None:
            work += wl.compute_s * noise.mult[i] * (1.0 + far) * (noise.compute_only[i] - 1.0)
        back = i - 1 - wl.run_ahead_steps
        host_start[i] = issue_start(prev_host_end, end[back] if back >= 0 else None)
        host_end = host_start[i] + host[i] + (delay if on_host else no_delay)
        # The pacer's delay comes before the rank's first collective (inside backward,
        # which it blocks): its whole tail shifts; a rank held back does not poll. On the
        # device it is a kernel on the stream; on the host a sleep, which reaches the
        # device only through the host's issue.
        begin = device_begin(prev_end, host_end, no_delay if on_host else delay)
        ready = stretch(begin + work, gpus, cfg.interference)
        # the last backward stretches with the whole step's compute
        last_bwd = bwd_last * noise.mult[i] * (ready - begin) / np.maximum(work, 1e-12)
        first_issue = ready - last_bwd * (1.0 - frac[0])
        # how far the host was ahead: 0 when the device waited for it to issue the step
        run_ahead[i] = begin - host_end
        free = 0.0
        spread = _iteration_spread(noise, cfg.network, float(service[i]), i, ready)
        if flow is None:
            comm[i] *= spread
        for k in range(sizes.size):
            issue = ready - last_bwd * (1.0 - frac[k])
            s = max(float(issue.max()), free)
            if flow is not None:
                comm[i, k] = flow.run(plans[k], s, salt=i * sizes.size + k, index=k) * spread
            free = s + comm[i, k]
            done = free + rng.uniform(0.0, jitter, world)
            if record:
                enter[i, k], exits[i, k] = issue, done
        finish = np.maximum(ready, done if sizes.size else ready)
        end[i] = finish + wl.opt_ms * 1e-3 * noise.mult[i]
        if noise.post_s is not None:
            end[i] = np.maximum(end[i] + noise.post_s[i], finish)
        start[i], delay_s[i] = prev_end, delay
        bound = float(end[i].max())
        if pacer is not None:
            # as the live controller: arrival at the first collective, before the delay
            # (here the device's: both placements are fed the same kind of arrival, so
            # comparing them compares only where the delay went)
            shift = delay_shift(prev_end, host_end, delay, on_host)
            observed = pacer.observe(i, first_issue - shift, bound - prev_bound)
            active[i] = observed is not None and observed.pacing
        prev_end, prev_host_end, prev_bound = end[i], host_end, bound
        if progress is not None:
            progress(i + 1, iters)
    ab_state = pacer.guard.state if pacer is not None and pacer.guard is not None else None
    return SimResult(
        cfg,
        topo,
        start,
        end,
        delay_s,
        enter,
        exits,
        sizes,
        comm,
        active,
        host_start_s=host_start,
        host_s=host,
        run_ahead_s=run_ahead,
        ab_state=ab_state,
    )
