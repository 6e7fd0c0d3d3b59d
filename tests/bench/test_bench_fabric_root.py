"""The benchmark on the real emulated fabric (root): busbw against the configured link
rate, and a planted slow link found as the slowest pairs of the matrix.

Rates are low (100 Mbit/s, a 20 Mbit/s slow link) and messages small, so the shapers,
not the two CPUs, set the numbers; the slow threshold is half the reference, since a
loaded machine can cost a fast pair a third of its rate; the fabric has a unique name
and is removed in ``finally``.
"""

from __future__ import annotations

import os
import secrets

import pytest

from syncpace.bench.config import BenchConfig
from syncpace.bench.on_fabric import bench_on_fabric, busbw_fractions, host_rate_gbps
from syncpace.fabric import build_spec
from syncpace.fabric.backend import SystemBackend
from syncpace.fabric.faults import parse_fault
from syncpace.fabric.lifecycle import down, existing_namespaces, up
from syncpace.fabric.state import STATE_DIR_ENV

pytestmark = [pytest.mark.root, pytest.mark.multirank]

HOSTS, SLOW = 4, 2


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("fabric-state")
    previous = os.environ.get(STATE_DIR_ENV)
    os.environ[STATE_DIR_ENV] = str(state_dir)
    name = "bt" + secrets.token_hex(3)
    spec = build_spec(
        {
            "topology": "star",
            "hosts": HOSTS,
            "host_rate": "100mbit",
            "name": name,
            "subnet": "10.234.0.0/24",
        }
    )
    backend = SystemBackend()
    state = up(spec, backend, state_dir)
    try:
        yield state
    finally:
        down(state, backend)
        assert not [ns for ns in existing_namespaces(backend) if ns.startswith(name)]
        if previous is None:
            os.environ.pop(STATE_DIR_ENV, None)
        else:
            os.environ[STATE_DIR_ENV] = previous


def test_all_reduce_busbw_approaches_the_link_rate(fabric, tmp_path):
    config = BenchConfig(
        ops="all_reduce",
        min_bytes="1M",
        max_bytes="2M",
        iters=3,
        warmup=1,
        pairs=False,
        timeout_s=120,
    )
    bench = bench_on_fabric(fabric, config, tmp_path / "run")
    fractions = [f for _, _, f in busbw_fractions(bench, host_rate_gbps(fabric))]
    print("all_reduce busbw / link rate:", [f"{f:.3f}" for f in fractions])
    assert len(fractions) == 2 and all(0.85 <= f <= 1.02 for f in fractions)
    assert bench["wrong"] == 0 and bench["hosts"] == [f"h{i}" for i in range(HOSTS)]


def test_a_slow_link_shows_as_the_slowest_pairs(fabric, tmp_path):
    config = BenchConfig(
        pairs_only=True, pair_bytes="512K", pair_iters=4, slow_fraction=0.5, timeout_s=120
    )
    faults = [parse_fault(f"rate h{SLOW}-sw 20mbit")]
    bench = bench_on_fabric(fabric, config, tmp_path / "run", faults=faults)
    m = bench["pairs"]
    entries = sorted(
        (m["bandwidth_gbps"][i][j], i, j) for i in range(HOSTS) for j in range(HOSTS) if i != j
    )
    involved = 2 * (HOSTS - 1)
    assert all(SLOW in (i, j) for _, i, j in entries[:involved])
    assert {(p["src"], p["dst"]) for p in m["slow"]} == {(i, j) for _, i, j in entries[:involved]}
    assert m["suspects"] == [SLOW]
    print("pair bandwidths (GB/s):", [(i, j, round(bw, 5)) for bw, i, j in entries])
    slow_rate, fast_rate = 20e6 / 8e9, 100e6 / 8e9
    # tbf's bucket lets a stream of a few hundred KiB run somewhat above the rate
    assert all(0.8 * slow_rate <= bw <= 1.15 * slow_rate for bw, _, _ in entries[:involved])
    assert all(0.75 * fast_rate <= bw <= 1.15 * fast_rate for bw, _, _ in entries[involved:])
