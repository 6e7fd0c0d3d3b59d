"""Test fixtures: seeded data-parallel traces with one planted cause each.

``SCENARIOS`` holds one :class:`Planted` run per failure mode the diagnosis must name
(and ``healthy``); :func:`generate` writes one as a trace directory. The saved copies in
``tests/data/`` are regenerated with ``python tests/data/make_scenarios.py``.

The model, per iteration and rank: forward then backward compute (lognormal jitter,
optionally slowed per rank or per local rank); DDP-like gradient buckets issued during
backward (or all at its end when overlap is off) and all-reduced over the world group on
one communication stream, so a bucket starts transferring when its last rank arrives and
the previous bucket is done; transfer = alpha + bytes x busbw factor / busbw, optionally
inflated on cross-node groups; the optimizer runs once compute and communication are
done. Files are written with the real :class:`~syncpace.trace.writer.RankTraceWriter`.

This is not the simulator (``syncpace.sim``: topologies, algorithms, network sharing,
pacing); it only plants each failure mode clearly enough to test the diagnosis, with
the exact timings a test can check against.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from syncpace import __version__
from syncpace.trace.busbw import bus_factor
from syncpace.trace.writer import RankTraceWriter

MIB = 1 << 20
_T0 = 1_000_000_000  # ns; first step starts 1 s into rank 0's clock


@dataclass(frozen=True, kw_only=True)
class Planted:
    """Parameters of one synthetic run. Times in ms, bandwidth in GB/s (= bytes/ns)."""

    name: str
    description: str = ""
    nodes: int = 2
    gpus_per_node: int = 4
    steps: int = 30
    seed: int = 0
    fwd_ms: float = 6.0
    bwd_ms: float = 12.0
    opt_ms: float = 1.0
    jitter: float = 0.01
    #: heavy-tailed jitter on every rank: (Lomax shape, scale) of extra forward compute
    #: per rank and step as a share of ``fwd_ms``, drawn apart from the rest of the run
    #: (the same run without it is the same seed with ``tail=None``)
    tail: tuple[float, float] | None = None
    #: (rank, step, ms): one-off stalls, extra forward compute of that rank in that step
    stalls: tuple[tuple[int, int, float], ...] = ()
    slow_ranks: tuple[tuple[int, float], ...] = ()
    #: (rank, factor, first step, end step): a rank slow in part of the run only
    slow_spans: tuple[tuple[int, float, int, int], ...] = ()
    slow_local_rank: tuple[int, float] | None = None
    buckets: int = 4
    bucket_bytes: int = 25 * MIB
    overlap: bool = True
    tiny_per_step: int = 0
    tiny_bytes: int = 8 * 1024
    alpha_us: float = 20.0
    busbw_gbps: float = 80.0
    intra_bytes: int = 0
    intra_busbw_gbps: float = 150.0
    cross_inflation: tuple[float, float] = (1.0, 1.0)
    clock_uncertainty_ns: int = 2_000
    hosts: tuple[str, ...] = ()
    #: an evaluation pass after the optimizer every ``eval_every`` steps (from step
    #: ``eval_every - 1``): ``eval_ms`` of compute with ``eval_calls`` all-reduces of
    #: ``eval_bytes`` (the metrics) spread over it
    eval_every: int = 0
    eval_ms: float = 19.0
    eval_calls: int = 10
    eval_bytes: int = 4096
    #: per rank and evaluation call, the spread of its compute (batches of other lengths)
    eval_jitter: float = 0.3
    #: what the diagnosis must find first, and where
    expected_mode: str = "healthy"
    expected_ranks: tuple[int, ...] = ()
    expected_nodes: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def host(self, node: int) -> str:
        return self.hosts[node] if node < len(self.hosts) else f"node{node}"

    def replace(self, **changes: Any) -> Planted:
        return dataclasses.replace(self, **changes)


SCENARIOS: dict[str, Planted] = {
    s.name: s
    for s in (
        Planted(name="healthy", description="small jitter, overlapped buckets"),
        Planted(
            name="straggler",
            description="rank 5 computes 15% slower in every iteration",
            slow_ranks=((5, 1.15),),
            expected_mode="straggler",
            expected_ranks=(5,),
            expected_nodes=("node1",),
        ),
        Planted(
            name="sync_amplification",
            description="random compute jitter (lognormal sigma 0.12) on every rank",
            jitter=0.12,
            expected_mode="sync_amplification",
        ),
        Planted(
            name="locality_variance",
            description="local rank 2 is 12% slower on every node (far NUMA node)",
            slow_local_rank=(2, 1.12),
            expected_mode="locality_variance",
            expected_ranks=(2, 6),
            expected_nodes=("node0", "node1"),
        ),
        Planted(
            name="fabric_contention",
            description="cross-node transfers inflated 1.5-4x at random; intra-node groups clean",
            intra_bytes=8 * MIB,
            cross_inflation=(1.5, 4.0),
            expected_mode="fabric_contention",
            expected_nodes=("node0", "node1"),
        ),
        Planted(
            name="latency_bound",
            description="48 tiny (8 KiB) all-reduces per iteration, unbucketed",
            steps=12,
            tiny_per_step=48,
            alpha_us=40.0,
            expected_mode="latency_bound",
        ),
        Planted(
            name="poor_overlap",
            description="every bucket issued after backward: no overlap",
            overlap=False,
            expected_mode="poor_overlap",
        ),
        Planted(
            name="bandwidth_bound",
            description="large buckets (4 x 100 MiB) at link rate",
            bucket_bytes=100 * MIB,
            expected_mode="bandwidth_bound",
        ),
    )
}


def generate(scenario: Planted, out_dir: str | Path) -> Path:
    """Write ``scenario`` as a trace directory; returns its path."""
    out = Path(out_dir)
    timeline = _simulate(scenario)
    for rank in range(scenario.world_size):
        writer = RankTraceWriter(
            out, rank, _meta(scenario, rank), flush_interval_s=3600.0, offset_ns=lambda: 0
        )
        for row in timeline.events[rank]:
            writer.add_event(row)
        for row in timeline.steps[rank]:
            writer.add_step(row)
        writer.close()
    return out


@dataclass
class _Timeline:
    events: list[list[tuple]]
    steps: list[list[tuple]]


def _speeds(sc: Planted) -> np.ndarray:
    """Each rank's compute time factor from the planted slow ranks and local rank."""
    world = sc.world_size
    speed = np.ones(world)
    for rank, factor in sc.slow_ranks:
        speed[rank] *= factor
    if sc.slow_local_rank is not None:
        local, factor = sc.slow_local_rank
        speed[np.arange(world) % sc.gpus_per_node == local] *= factor
    return speed


def _step_calls(sc: Planted, groups: dict[str, np.ndarray]) -> list[tuple[float, str, int]]:
    """A step's calls as (issue fraction of backward, group, bytes), in issue order;
    an intra-node group's call is issued mid-forward (a negative fraction)."""
    calls: list[tuple[float, str, int]] = []
    for k in range(sc.tiny_per_step):
        calls.append(((k + 0.5) / sc.tiny_per_step, "0", sc.tiny_bytes))
    for k in range(sc.buckets):
        calls.append(((k + 1) / sc.buckets if sc.overlap else 1.0, "0", sc.bucket_bytes))
    calls.sort(key=lambda c: c[0])
    for name in groups:
        if name != "0":
            calls.insert(0, (-0.5, name, sc.intra_bytes))
    return calls


def _simulate(sc: Planted) -> _Timeline:
    rng = np.random.default_rng(sc.seed)
    world = sc.world_size
    node_of = np.arange(world) // sc.gpus_per_node
    speed = _speeds(sc)
    groups = {"0": np.arange(world)}
    if sc.intra_bytes:
        groups.update({f"{sc.host(n)}-tp": np.flatnonzero(node_of == n) for n in range(sc.nodes)})
    seq = dict.fromkeys(groups, 0)
    free = dict.fromkeys(groups, float(_T0))  # when each group's stream is idle again
    tl = _Timeline([[] for _ in range(world)], [[] for _ in range(world)])
    start = np.full(world, float(_T0))
    tail = np.zeros((sc.steps, world))
    if sc.tail is not None:
        shape, scale = sc.tail
        tail = np.random.default_rng([sc.seed, 1]).pareto(shape, (sc.steps, world)) * scale
    for step in range(sc.steps):
        f = speed * rng.lognormal(0.0, sc.jitter, world)
        for rank, factor, first, end in sc.slow_spans:
            if first <= step < end:
                f[rank] *= factor
        fwd, bwd = sc.fwd_ms * 1e6 * (f + tail[step]), sc.bwd_ms * 1e6 * f
        for rank, at, ms in sc.stalls:
            if at == step:
                fwd[rank] += ms * 1e6
        done = start + fwd + bwd
        calls = _step_calls(sc, groups)
        comm_end = start.copy()
        for frac, name, nbytes in calls:
            ranks = groups[name]
            at = np.where(frac < 0, start + fwd * -frac, start + fwd + bwd * max(frac, 0.0))
            enter = at[ranks]
            begin = max(float(enter.max()), free[name])
            dur = _transfer_ns(sc, name, len(ranks), nbytes, rng)
            free[name] = begin + dur
            exits = begin + dur + rng.uniform(0, 2_000, len(ranks))
            for r, e_in, e_out in zip(ranks, enter, exits, strict=True):
                row = (
                    int(r),
                    step,
                    name,
                    len(ranks),
                    seq[name],
                    "all_reduce",
                    nbytes,
                    "float32",
                    -1,
                    int(e_in),
                    int(e_out),
                    "simulated",
                    "completed",
                    None,
                    -1,
                )
                tl.events[r].append(row)
            comm_end[ranks] = np.maximum(comm_end[ranks], exits)
            seq[name] += 1
        end = np.maximum(done, comm_end) + sc.opt_ms * 1e6 * f
        if sc.eval_every and step % sc.eval_every == sc.eval_every - 1:
            end = _evaluate(sc, tl, step, end, f, seq, free, rng)
        for r in range(world):
            tl.steps[r].append((r, step, int(start[r]), int(end[r]), 0))
        start = end
    return tl


def _evaluate(
    sc: Planted,
    tl: _Timeline,
    step: int,
    start: np.ndarray,
    f: np.ndarray,
    seq: dict[str, int],
    free: dict[str, float],
    rng: np.random.Generator,
) -> np.ndarray:
    """An evaluation pass of ``step`` from ``start``: its calls into ``tl``; its end."""
    world = sc.world_size
    at = start.copy()
    for _ in range(sc.eval_calls):
        enter = (
            at + sc.eval_ms * 1e6 * f * rng.lognormal(0.0, sc.eval_jitter, world) / sc.eval_calls
        )
        at = np.maximum(at, enter)
        begin = max(float(at.max()), free["0"])
        dur = _transfer_ns(sc, "0", world, sc.eval_bytes, rng)
        free["0"] = begin + dur
        exits = begin + dur + rng.uniform(0, 2_000, world)
        for r in range(world):
            tl.events[r].append(
                (
                    r,
                    step,
                    "0",
                    world,
                    seq["0"],
                    "all_reduce",
                    sc.eval_bytes,
                    "float32",
                    -1,
                    int(at[r]),
                    int(exits[r]),
                    "simulated",
                    "completed",
                    None,
                    -1,
                )
            )
        seq["0"] += 1
        at = exits
    return at


def _transfer_ns(sc: Planted, group: str, n: int, nbytes: int, rng: np.random.Generator) -> float:
    factor = bus_factor("all_reduce", n)
    cross = group == "0" and sc.nodes > 1
    busbw = sc.busbw_gbps if cross or sc.nodes == 1 else sc.intra_busbw_gbps
    ns = sc.alpha_us * 1e3 + nbytes * factor / busbw
    noise = rng.uniform(0.98, 1.04)
    if cross:
        noise *= rng.uniform(*sc.cross_inflation)
    return ns * noise


def _meta(sc: Planted, rank: int) -> dict[str, Any]:
    node, local = divmod(rank, sc.gpus_per_node)
    groups = {"0": {"ranks": list(range(sc.world_size)), "backend": "nccl"}}
    if sc.intra_bytes:
        for n in range(sc.nodes):
            members = list(range(n * sc.gpus_per_node, (n + 1) * sc.gpus_per_node))
            groups[f"{sc.host(n)}-tp"] = {"ranks": members, "backend": "nccl"}
    return {
        "tool_version": __version__,
        "world_size": sc.world_size,
        "host": sc.host(node),
        "node_rank": node,
        "local_rank": local,
        "local_world_size": sc.gpus_per_node,
        "pid": 0,
        "device": f"cuda:{local}",
        "backend": "nccl",
        "clock": {
            "offset_ns": 0,
            "uncertainty_ns": 0 if rank == 0 else sc.clock_uncertainty_ns,
            "samples": [],
        },
        "groups": groups,
        "config": {"scenario": sc.name, "seed": sc.seed, "description": sc.description},
        "started_ns": _T0,
        "source": "synthetic",
    }
