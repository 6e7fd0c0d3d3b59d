"""The simulation loop: reproducibility, the ring recurrence, noise and pacing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from syncpace.control.policy import PacingConfig
from syncpace.sim.engine import ring_exits, simulate
from syncpace.sim.noise import NoiseSpec, draw
from syncpace.sim.tracewrite import write_trace
from syncpace.trace.reader import load_trace

from .conftest import config


def digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def test_same_seed_same_trace(tmp_path: Path) -> None:
    cfg = config(
        noise={"jitter": 0.05, "os_burst_prob": 0.01, "loader_prob": 0.01, "throttle_rate": 0.01},
        network={"background_load": 0.1, "background_duty": 0.2},
    )
    a = write_trace(simulate(cfg), tmp_path / "a")
    b = write_trace(simulate(cfg), tmp_path / "b")
    c = write_trace(simulate(cfg.replace(run=config(run={"seed": 4}).run)), tmp_path / "c")
    assert digest(a) == digest(b)
    assert digest(a) != digest(c)
    trace = load_trace(a)
    assert trace.world_size == 16 and not trace.warnings
    assert trace.meta[0]["source"] == "simulator" and trace.meta[5]["host"] == "node1"
    assert trace.events.height == 16 * 60 * 4  # ranks x steps x buckets


@pytest.mark.slow
def test_same_seed_same_flow_tier_run() -> None:
    cfg = config(
        network={"tier": "flow", "background_load": 0.2},
        run={"steps": 15},
        topology={"cluster_nodes": 8, "placement": "scattered"},
    )
    a, b = simulate(cfg), simulate(cfg)
    assert np.array_equal(a.end_s, b.end_s) and np.array_equal(a.comm_s, b.comm_s)


def test_flow_and_analytical_tiers_agree_without_other_traffic() -> None:
    cfg = config(run={"steps": 12})
    flow = simulate(cfg.replace(network=config(network={"tier": "flow"}).network))
    assert flow.comm_s == pytest.approx(simulate(cfg).comm_s, rel=1e-6)


@pytest.mark.parametrize("n", [3, 8, 17])
@pytest.mark.parametrize("steps", [1, 2, 5, 32])
def test_ring_exits_closed_form_matches_recurrence(n: int, steps: int) -> None:
    rng = np.random.default_rng(n * 100 + steps)
    starts = rng.uniform(0, 1, n)
    t = starts.copy()
    for _ in range(steps):  # t[r, k] = max(t[r, k-1], t[r-1, k-1]) + step
        t = np.maximum(t, np.roll(t, 1)) + 0.1
    assert ring_exits(starts, 0.1, steps) == pytest.approx(t)


def test_noise_sources_are_independent_and_seeded() -> None:
    a = draw(NoiseSpec(jitter=0.05), 50, 4, 4, seed=1)
    b = draw(NoiseSpec(jitter=0.05, loader_prob=0.1), 50, 4, 4, seed=1)
    assert np.array_equal(a.mult, b.mult)  # adding hiccups leaves the jitter draws alone
    assert b.stall_s.max() > 0 and a.stall_s.max() == 0
    t = draw(
        NoiseSpec(jitter=0.0, throttle_rate=0.05, throttle_steps=10, throttle_factor=1.5),
        400,
        4,
        2,
        0,
    )
    assert 0.1 < t.throttled.mean() < 0.6  # episodes of ~10 steps starting at 5 %
    assert np.all(t.mult[t.throttled.repeat(2, axis=1)] == 1.5)


def test_heavy_tail_has_a_heavier_tail() -> None:
    light = draw(NoiseSpec(jitter=0.05), 2000, 4, 8, 0).mult
    heavy = draw(NoiseSpec(jitter=0.05, distribution="pareto", tail_shape=2.5), 2000, 4, 8, 0).mult

    def excess(x):  # noqa: E306
        return np.quantile(x, 0.9999) / np.median(x)

    assert excess(heavy) > excess(light)


def paced(mode: str):
    """Persistent per-rank speed spread on 8-GPU nodes: some ranks always arrive early."""
    cfg = config(
        topology={"nodes": 4, "gpus_per_node": 8, "nics_per_node": 8},
        noise={"rank_spread": 0.1, "jitter": 0.01},
        interference={"mode": mode, "slowdown": 0.6},
        run={"steps": 150, "warmup": 40},
    )
    off = simulate(cfg).summary()
    on = simulate(cfg.replace(pacing=PacingConfig(strategy="early"))).summary()
    return off, on


def test_pacing_helps_only_through_the_modelled_interference() -> None:
    off, on = paced("spin")
    assert on["pacing_on_share"] > 0.5
    assert on["throughput"] > off["throughput"] * 1.01  # early ranks sleep instead of polling
    off, on = paced("none")
    assert on["throughput"] <= off["throughput"] * 1.001  # waiting is free: delay cannot help


def test_pacing_delays_are_in_the_trace(tmp_path: Path) -> None:
    cfg = config(noise={"rank_spread": 0.15}, pacing={"strategy": "early"}, run={"steps": 40})
    trace = load_trace(write_trace(simulate(cfg), tmp_path))
    assert trace.steps["pacing_delay_ns"].max() > 0
