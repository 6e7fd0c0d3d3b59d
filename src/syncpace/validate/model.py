"""A grid point, the real run's statistics, and the simulator configured for it.

Calibration is the documented one and nothing more:

* α and β from ``syncpace bench`` on a non-blocking star of the same rank count
  (:func:`syncpace.sim.calibrate.from_bench`: β becomes the NIC rate, α per ring step);
* compute from the run's own trace, by the simulator's trace calibration
  (:func:`syncpace.sim.calibrate.compute_table` and
  :func:`~syncpace.sim.calibrate.compute_profile`): per rank and step, the first
  collective's entry minus the step start (the validation job computes, then issues its
  all-reduces one after another; ``from_trace`` finds that from the trace, here it is
  known). Its median sets the compute time, the per-rank medians give the slow ranks
  (more than 10 % above the median: ``slow_ranks``, with the *measured* mean ratio as
  ``slow_factor``) and the spread of the others (``rank_spread``), and the
  per-iteration σ of log(compute / rank median) the ``jitter``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from syncpace.analysis.metrics import compute_metrics
from syncpace.errors import ConfigError
from syncpace.sim.calibrate import Calibration, ComputeProfile, compute_profile, compute_table
from syncpace.sim.engine import RunSpec, SimConfig, SimResult
from syncpace.sim.network import NetworkSpec
from syncpace.sim.noise import NoiseSpec
from syncpace.sim.topology import TopologySpec
from syncpace.sim.workload import MIB, WorkloadSpec
from syncpace.trace.reader import load_trace
from syncpace.validate.compare import Stats, stats_of


@dataclass(frozen=True, kw_only=True)
class Point:
    """One real run of the grid: fabric, job and what is planted."""

    name: str
    topology: str  # "star" or "leafspine" (2 leaves)
    ranks: int
    oversub: float = 1.0
    compute_ms: float = 150.0
    jitter: float = 0.1
    slow_ms: float = 0.0  # added to the last rank's compute
    # background flows between the fabric's hosts for the whole run: greedy TCP, or UDP
    # at ``flow_share`` of the host link rate each when that is > 0
    flows: tuple[tuple[str, str], ...] = ()
    flow_share: float = 0.0
    # hosts acknowledge every TCP segment at once (the fabric's quickack): Linux's
    # delayed ACKs stall small transfers, which the simulator does not model
    quickack: bool = True
    # a point that measures a mechanism the model is known to miss (docs/validation.md):
    # its failure is reported, named, and does not fail the grid
    gap: str = ""
    buckets: int = 2
    bucket_bytes: int = 256 * 1024
    steps: int = 40

    def __post_init__(self) -> None:
        if self.topology not in ("star", "leafspine"):
            raise ConfigError(f"{self.name}: topology must be star or leafspine")
        if self.topology == "leafspine" and self.ranks % 2:
            raise ConfigError(f"{self.name}: a 2-leaf leaf-spine needs an even rank count")
        if not 0 <= self.flow_share < 1:
            raise ConfigError(f"{self.name}: flow_share must be in [0, 1), got {self.flow_share}")

    @property
    def slow_rank(self) -> int:
        return self.ranks - 1 if self.slow_ms > 0 else -1

    @property
    def background_flows(self) -> tuple[str, ...]:
        """The flows as the simulator's ``background_flows`` (host hI is node I)."""
        share = f"@{self.flow_share * UDP_WIRE:.4f}" if self.flow_share else ""
        return tuple(f"{src[1:]}->{dst[1:]}{share}" for src, dst in self.flows)


def real_stats(run_dir: str | Path, warmup: int) -> tuple[Stats, ComputeProfile]:
    """The compared statistics and the compute profile of a traced real run."""

    trace = load_trace(run_dir)
    steps = trace.steps
    bound = steps.group_by("step").agg(pl.col("end_ns").max()).sort("step")
    start = int(steps.filter(pl.col("step") == warmup)["start_ns"].min())  # type: ignore[arg-type]
    ends = bound.filter(pl.col("step") >= warmup)["end_ns"].to_numpy()
    iteration_s = np.diff(np.r_[start, ends]) / 1e9
    metrics = compute_metrics(trace, warmup_steps=warmup)
    inst = metrics.instances.filter(pl.col("complete"), pl.col("service_ns") > 0)
    transfer_s = inst["service_ns"].to_numpy() / 1e9
    profile = compute_profile(compute_table(steps, trace.events, warmup, end="first"))
    return stats_of(iteration_s, transfer_s), profile


# A UDP flow's share of the wire is its payload share times frame over payload
# (1,442 bytes of Ethernet, IP and UDP for 1,400 of payload): that share of the
# calibrated capacity is what it leaves the job.
UDP_WIRE = 1442 / 1400


#: The hosts' congestion control (Linux's name) as the packet tier's ``packet_tcp``.
PACKET_TCP = {"bbr": "bbr", "cubic": "cubic", "reno": "newreno"}
#: What the packet tier runs for a grid point, the emulated fabric's links and TCP:
#: its tbf shaper, connections carrying two steps before the measured one (the grid's
#: steps rest under the 200 ms minimum RTO, so a job's connections keep their state),
#: and 8 offsets against background flows; docs/validation.md, "The packet tier".
PACKET_WARM = 2
PACKET_SAMPLES = 8
TIERS = ("analytical", "flow", "packet")


@dataclass(frozen=True, kw_only=True)
class Fabric:
    """What the real run's fabric was, as the packet tier needs it."""

    rate_bps: int  # every host link
    congestion_control: str  # read back from the hosts and recorded
    queue_ms: float = 50.0


def packet_tcp(congestion_control: str) -> str:
    """The packet tier's TCP for the hosts' recorded congestion control."""
    try:
        return PACKET_TCP[congestion_control]
    except KeyError:
        known = ", ".join(PACKET_TCP)
        raise ConfigError(
            f"the hosts ran {congestion_control or 'an unrecorded'} congestion control; "
            f"the packet tier models {known}"
        ) from None


def sim_config(
    point: Point,
    bench: Calibration,
    profile: ComputeProfile,
    steps: int,
    seed: int = 0,
    *,
    tier: str = "analytical",
    fabric: Fabric | None = None,
) -> SimConfig:
    """The simulator set up for ``point`` from the bench fit and the measured compute,
    on ``tier``. The packet tier needs the ``fabric``: it sends TCP's own headers over
    links of the fabric's rate (β, which has paid them, would count them twice), shaped
    as the fabric shapes them, with the congestion control its hosts ran. The fast tiers
    take the hosts' congestion control and queue from it too, for the standing queue of
    a greedy flow (a congestion control the tiers do not model leaves the default)."""
    if bench.bandwidth_gbps is None:
        raise ConfigError(f"{bench.source}: the bench fit has no bandwidth")
    if tier not in TIERS:
        raise ConfigError(f"{point.name}: tier {tier!r} is not one of {', '.join(TIERS)}")
    if tier == "packet" and fabric is None:
        raise ConfigError(f"{point.name}: the packet tier needs the fabric's rate and TCP")
    packet: dict[str, Any] = {}
    nic_gbps = bench.bandwidth_gbps
    if fabric is not None and fabric.congestion_control in PACKET_TCP:
        # the fast tiers' standing queue of a greedy flow: the hosts' TCP and queues
        packet = {
            "packet_tcp": PACKET_TCP[fabric.congestion_control],
            "packet_queue_ms": fabric.queue_ms,
        }
    if tier == "packet" and fabric is not None:
        nic_gbps = fabric.rate_bps / 8e9  # GB/s, as the topology counts
        packet = {
            "packet_tcp": packet_tcp(fabric.congestion_control),
            "packet_shaper": "tbf",
            "packet_queue_ms": fabric.queue_ms,
            "packet_delayed_ack": 1 if point.quickack else 2,
            "packet_warm": PACKET_WARM,
            "packet_samples": PACKET_SAMPLES,
        }
    topo = TopologySpec(
        kind="switch" if point.topology == "star" else "leafspine",
        nodes=point.ranks,
        gpus_per_node=1,
        nics_per_node=1,
        nic_gbps=nic_gbps,
        nodes_per_leaf=max(point.ranks // 2, 1),
        spines=1,
        oversub=point.oversub if point.topology == "leafspine" else 1.0,
    )
    size_mb = point.bucket_bytes / MIB
    workload = WorkloadSpec(
        fwd_ms=0.0,
        bwd_ms=profile.compute_ms,
        opt_ms=0.0,
        model_mb=size_mb * point.buckets,
        bucket_mb=size_mb,
        overlap=False,
    )
    noise = NoiseSpec(
        jitter=profile.jitter,
        rank_spread=profile.rank_spread,
        slow_ranks=profile.slow_ranks,
        slow_factor=max(profile.slow_factor, 1.0),
        slow_factors=tuple(max(f, 1.0) for f in profile.slow_factors),
    )
    network = NetworkSpec(
        tier=tier,
        algorithm="ring",
        alpha_us=bench.alpha_us or 0.0,
        background_flows=point.background_flows,
        **packet,
    )
    return SimConfig(
        name=point.name,
        topology=topo,
        workload=workload,
        noise=noise,
        network=network,
        run=RunSpec(steps=steps, seed=seed, warmup=min(10, steps // 5)),
    )


def sim_stats(result: SimResult) -> Stats:
    warm = result.config.run.warmup
    return stats_of(result.iteration_s()[warm:], result.comm_s[warm:].ravel())
