"""Traffic that is not the job's beside calls below the latency knee, on a slow fabric.

A star of 3 hosts at 100 Mbit/s runs a 3-rank ring of 256 KiB all-reduces: each host
link carries 2(n-1)/n of the bytes, 28 ms at the link's rate, far past the knee that
``latency_knee_bytes`` (1 MiB) sets for fast fabrics. h1 sends UDP to h2 at half the
link's rate: the ring crosses h1's link out and h2's link in, gets the other half, and
each transfer takes twice its bytes' time. The counters carry the foreign bytes: the
fabric's link counters, or the hosts' NIC counters of a veth that declares no speed (the
emulated fabric's), whose rate is then the host link's as the fabric set it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tests.analysis.slowedring import slowed_ring
from tests.linkcounters import Direction, star, write_links

from syncpace.analysis import Thresholds, analyze
from syncpace.analysis.detectors.traffic import FOREIGN_SHARE as FOREIGN_SHARE_RULE
from syncpace.trace.hostwriter import CountersWriter, host_paths, write_host_meta

MS = 1_000_000
NBYTES = 256 << 10
HOSTS = ["h0", "h1", "h2"]
RATE_BPS = 100_000_000
PER_HOST = NBYTES * 2 * (len(HOSTS) - 1) / len(HOSTS)
BYTES_MS = PER_HOST / (RATE_BPS / 8) * 1e3  # one transfer's bytes at the link's rate
FOREIGN_SHARE = 0.5  # of the link's rate, from h1 to h2
SLOWER = 1 / (1 - FOREIGN_SHARE)
COMPUTE_MS, AFTER_MS, STEPS = 30.0, 1.0, 40
#: the transfers' latency beside their bytes' time (the link benchmark's α, when set)
ALPHA_MS = 1.0


def run(
    root: Path,
    foreign: tuple[float, float] | None,
    alpha_ms: float = 0.0,
    share: float = FOREIGN_SHARE,
    compute_ms: float = COMPUTE_MS,
) -> tuple:
    """The ring, each transfer whose middle falls while h1 sends (``foreign``: from, to
    in ms; ``None``: never) taking its bytes at the rate the ``share`` of it sent by h1
    leaves. Returns the job's own bytes per host by time, the foreign bytes by time,
    the end (ms) and the same job's mean iteration without foreign traffic (by
    construction)."""
    own, other, t = slowed_ring(
        root,
        hosts=HOSTS,
        steps=STEPS,
        compute_ms=compute_ms,
        after_ms=AFTER_MS,
        nbytes=NBYTES,
        per_host=PER_HOST,
        bytes_ms=BYTES_MS,
        slower=1 / (1 - share),
        foreign=foreign,
        foreign_per_ms=share * RATE_BPS / 8 / 1e3,
        alpha_ms=alpha_ms,
    )
    return own, other, t, compute_ms + alpha_ms + BYTES_MS + AFTER_MS


def carries_foreign(src: str, dst: str) -> bool:
    return (src, dst) in (("h1", "sw"), ("sw", "h2"))


def link_counters(root: Path, own: Callable, other: Callable, end_ms: float) -> None:
    """Every direction of the star every 100 ms: the job's bytes each way, h1's
    foreign bytes on h1's link out and h2's link in."""

    def nbytes(d: Direction, t_ns: int) -> int:
        _, src, dst, _, _ = d
        t_ms = t_ns / MS
        return int(own(t_ms) + (other(t_ms) if carries_foreign(src, dst) else 0.0))

    times = range(0, int((end_ms + 200) * MS), 100 * MS)
    write_links(root, star(HOSTS, lambda h: RATE_BPS), times, nbytes)


def nic_counters(root: Path, own: Callable, other: Callable, end_ms: float) -> None:
    """Each host's eth0 every 50 ms, without a link speed (a veth declares none); the
    fabric's link counters give only the rates (one sample before the run, one after:
    no interval of theirs falls within the steps)."""
    write_links(root, star(HOSTS, lambda h: RATE_BPS), [0, int((end_ms + 500) * MS)])
    series = [("nic", "eth0", -1, c) for c in ("rx_bytes", "tx_bytes")]
    for host in HOSTS:
        meta, counters = host_paths(root, host)
        write_host_meta(meta, {"host": host})
        w = CountersWriter(counters, host)
        for t_ms in np.arange(0.0, end_ms + 100.0, 50.0):
            rx = own(t_ms) + (other(t_ms) if host == "h2" else 0.0)
            tx = own(t_ms) + (other(t_ms) if host == "h1" else 0.0)
            w.write([int(t_ms * MS)] * 2, [0, 1], [int(rx), int(tx)], series)
        w.close()


@pytest.mark.parametrize("counters", [link_counters, nic_counters], ids=["links", "nics"])
def test_foreign_traffic_beside_calls_below_the_knee_is_contention(
    tmp_path: Path, counters: Callable
) -> None:
    """h1 sends over the middle 40 % of the run: the transfers outside it are the
    baseline, those beside it twice as slow; the replay puts them back at their pace."""
    run_ms = STEPS * (COMPUTE_MS + BYTES_MS + AFTER_MS)
    own, other, end, healthy_ms = run(tmp_path, foreign=(0.3 * run_ms, 0.7 * run_ms))
    counters(tmp_path, own, other, end)
    analysis = analyze(tmp_path)
    top = analysis.top
    assert top.mode == "fabric_contention", [f.summary for f in analysis.findings]
    assert top.source[0] == "h1", top.source
    ev = top.evidence
    assert ev["foreign_senders"][0] == "h1"
    assert ev["baseline"] == "their own pace outside those intervals"
    assert ev["slower_beside_foreign"] == pytest.approx(SLOWER, rel=0.05)
    row = analysis.what_if[0].row("links:beside")
    assert row.iteration_ns / 1e6 == pytest.approx(healthy_ms, rel=0.01)
    assert "h1" in top.summary.split(":")[0]


def test_foreign_traffic_all_run_long_is_costed_at_the_benchmarked_link(tmp_path: Path) -> None:
    """h1 sends all run long: no transfer is clean, so the benchmark's link (its rate
    and α) is the baseline; each transfer at it saves what the foreign half took."""
    own, other, end, healthy_ms = run(tmp_path, foreign=(0.0, 1e9), alpha_ms=ALPHA_MS)
    link_counters(tmp_path, own, other, end)
    gbps = RATE_BPS / 8 / 1e9  # a ring's bus bandwidth is the links' rate
    th = Thresholds(link_gbps=gbps, link_alpha_us=ALPHA_MS * 1e3)
    analysis = analyze(tmp_path, th)
    top = analysis.top
    assert top.mode == "fabric_contention", [f.summary for f in analysis.findings]
    assert top.source[0] == "h1"
    ev = top.evidence
    assert ev["baseline"].startswith("the link rate set")
    slow_ms = ALPHA_MS + SLOWER * BYTES_MS
    assert ev["slower_beside_foreign"] == pytest.approx(slow_ms / (ALPHA_MS + BYTES_MS), rel=0.02)
    iteration_ms = COMPUTE_MS + slow_ms + AFTER_MS
    assert top.cost == pytest.approx(1 - healthy_ms / iteration_ms, abs=0.01)


@pytest.mark.parametrize("counters", [link_counters, nic_counters], ids=["links", "nics"])
def test_the_jobs_own_bytes_below_the_knee_are_no_contention(
    tmp_path: Path, counters: Callable
) -> None:
    own, other, end, _ = run(tmp_path, foreign=None)
    counters(tmp_path, own, other, end)
    analysis = analyze(tmp_path)
    assert "fabric_contention" not in {f.mode for f in analysis.findings}


@pytest.mark.parametrize("counters", [link_counters, nic_counters], ids=["links", "nics"])
def test_foreign_traffic_all_run_long_without_a_known_latency_takes_its_share(
    tmp_path: Path, counters: Callable
) -> None:
    """h1 sends all run long and no benchmark says the calls' latency (the hosts' line
    rate alone is known): each transfer's time less what half the rate taken from its
    bytes cost it (its bytes at the half left against at the whole rate) is its time
    without the foreign traffic; its 1 ms of latency is kept, not read as contention."""
    own, other, end, healthy_ms = run(tmp_path, foreign=(0.0, 1e9), alpha_ms=ALPHA_MS)
    counters(tmp_path, own, other, end)
    analysis = analyze(tmp_path)
    top = analysis.top
    assert top.mode == "fabric_contention", [f.summary for f in analysis.findings]
    assert top.source[0] == "h1"
    ev = top.evidence
    assert ev["baseline"] == "the hosts' link rate, 100 Mbit/s"
    slow_ms = ALPHA_MS + SLOWER * BYTES_MS
    assert ev["slower_beside_foreign"] == pytest.approx(slow_ms / (ALPHA_MS + BYTES_MS), rel=0.03)
    iteration_ms = COMPUTE_MS + slow_ms + AFTER_MS
    assert top.cost == pytest.approx(1 - healthy_ms / iteration_ms, abs=0.015)


@pytest.mark.parametrize(
    ("share", "compute_ms", "reported"),
    [(0.15, COMPUTE_MS, True), (0.12, 4 * COMPUTE_MS, False)],
    ids=["costly", "cheap"],
)
def test_a_little_slower_all_run_long_is_contention_by_what_it_costs(
    tmp_path: Path, share: float, compute_ms: float, reported: bool
) -> None:
    """A fixed-rate flow taking a sixth of h1's link all run long slows each transfer
    by under ``foreign_inflation`` (1.18x with the latency), yet costs 7.6 % of each
    iteration: reported, at that cost, by the rule every finding follows. The same
    kind of flow beside a job four times longer in compute costs under 3 %: no
    warning."""
    own, other, end, healthy_ms = run(
        tmp_path, foreign=(0.0, 1e9), alpha_ms=ALPHA_MS, share=share, compute_ms=compute_ms
    )
    link_counters(tmp_path, own, other, end)
    th = Thresholds(link_gbps=RATE_BPS / 8 / 1e9, link_alpha_us=ALPHA_MS * 1e3)
    analysis = analyze(tmp_path, th)
    slow_ms = ALPHA_MS + BYTES_MS / (1 - share)
    assert slow_ms / (ALPHA_MS + BYTES_MS) < th.foreign_inflation
    truth = 1 - healthy_ms / (compute_ms + slow_ms + AFTER_MS)
    found = {f.mode: f for f in analysis.findings}
    if reported:
        assert truth >= th.warning_cost
        top = analysis.top
        assert top.mode == "fabric_contention", [f.summary for f in analysis.findings]
        assert top.source[0] == "h1"
        assert top.cost == pytest.approx(truth, abs=0.01)
    else:
        assert truth < th.warning_cost
        assert "fabric_contention" not in found, found["fabric_contention"].summary
        assert analysis.top.mode != "fabric_contention"


def test_intervals_with_a_sixth_of_the_link_not_the_jobs_are_no_baseline(tmp_path: Path) -> None:
    """h1 sends a sixth of the link all run long beside a job that keeps the link busy:
    in the counters' intervals holding the most of the job's bytes the foreign ones are
    under ``FOREIGN_SHARE`` of the bytes (not foreign traffic by that rule), yet take
    ``FOREIGN_RATE`` of the rate. The transfers there are as slow as the others: taken
    as the clean baseline they hid the contention; the links' capacity is the baseline."""
    share, compute_ms = 0.16, 8.0
    own, other, end, healthy_ms = run(
        tmp_path, foreign=(0.0, 1e9), alpha_ms=ALPHA_MS, share=share, compute_ms=compute_ms
    )
    link_counters(tmp_path, own, other, end)
    # the premise: some intervals of h1's link out are under a fifth foreign bytes
    shares = []
    for t in range(0, int(end) - 100, 100):
        foreign, job = other(t + 100) - other(t), own(t + 100) - own(t)
        shares.append(foreign / (foreign + job))
    assert min(shares) < FOREIGN_SHARE_RULE <= max(shares), shares
    th = Thresholds(link_gbps=RATE_BPS / 8 / 1e9, link_alpha_us=ALPHA_MS * 1e3)
    analysis = analyze(tmp_path, th)
    top = analysis.top
    assert top.mode == "fabric_contention", [f.summary for f in analysis.findings]
    assert top.evidence["baseline"].startswith("the link rate set")
    truth = 1 - healthy_ms / (compute_ms + ALPHA_MS + BYTES_MS / (1 - share) + AFTER_MS)
    assert top.cost == pytest.approx(truth, abs=0.015)
