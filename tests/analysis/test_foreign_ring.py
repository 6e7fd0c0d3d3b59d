"""Traffic that is not the job's beside a job of two ranks per host: a ring crosses a
host's link once each way, not once per rank.

Four ranks on two hosts (0 and 1 on h0, 2 and 3 on h1) all-reduce in a ring: of each
host's two ranks only one (1, 3) sends to a rank of the other host, so each host link
carries 2(n-1)/n = 1.5 times the bytes one way, as much the other. h0 sends 0.4 GB/s to
h1 all run long on 1 GB/s links: the job's transfers get 0.6 GB/s, 1/0.6 times slower.
Counting every rank's bytes as crossing (twice the truth) would hide most of the
foreign bytes under the job's own.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from tests.analysis.slowedring import slowed_ring
from tests.linkcounters import star, write_links

from syncpace.analysis import analyze
from syncpace.analysis.detectors.foreign import _per_iteration
from syncpace.analysis.thresholds import Thresholds

MS = 1_000_000
NBYTES = 8 << 20
RATE_BPS = 8_000_000_000  # 1 GB/s
HOSTS = ["h0", "h0", "h1", "h1"]
PER_HOST = NBYTES * 1.5  # one rank of each host sends its 2(n-1)/n across
AT_RATE_MS = PER_HOST / 1e9 * 1e3
FOREIGN_GBPS = 0.4
SLOWER = 1 / (1 - FOREIGN_GBPS)
COMPUTE_MS, AFTER_MS = 20.0, 1.0


def run(root: Path, foreign: bool) -> Path:
    own, other, t = slowed_ring(
        root,
        hosts=HOSTS,
        steps=40,
        compute_ms=COMPUTE_MS,
        after_ms=AFTER_MS,
        nbytes=NBYTES,
        per_host=PER_HOST,
        bytes_ms=AT_RATE_MS,
        slower=SLOWER,
        foreign=(0.0, 1e9) if foreign else None,
        foreign_per_ms=FOREIGN_GBPS * 1e6,  # GB/s x ms
    )

    def nbytes(d, t_ns: int) -> int:
        _, src, dst, _, _ = d
        towards = (src, dst) in (("h0", "sw"), ("sw", "h1"))
        return int(own(t_ns / MS) + (other(t_ns / MS) if towards else 0))

    times = range(0, int((t + 200) * MS), 100 * MS)
    write_links(root, star(["h0", "h1"], lambda h: RATE_BPS), times, nbytes)
    return root


def test_foreign_bytes_beside_a_ring_of_two_ranks_a_host_are_found(tmp_path: Path) -> None:
    analysis = analyze(run(tmp_path, foreign=True), Thresholds(link_gbps=1.0))
    top = analysis.top
    assert top.mode == "fabric_contention", [f.summary for f in analysis.findings]
    ev = top.evidence
    assert ev["foreign_senders"] == ["h0"]
    assert ev["slower_beside_foreign"] == pytest.approx(SLOWER, rel=0.02)
    # h0's sending: its 0.4 GB/s beside the ring's bytes, averaged over the iteration
    iteration_ms = COMPUTE_MS + SLOWER * AT_RATE_MS + AFTER_MS
    job_gbps = PER_HOST / (iteration_ms * 1e6)
    share = FOREIGN_GBPS / (FOREIGN_GBPS + job_gbps)
    assert ev["foreign_share_by_carrier"]["host link h0→sw"] == pytest.approx(share, abs=0.03)
    healthy_ms = COMPUTE_MS + AT_RATE_MS + AFTER_MS
    assert top.cost == pytest.approx(1 - healthy_ms / iteration_ms, abs=0.01)


def test_the_ring_s_own_bytes_are_no_foreign_traffic(tmp_path: Path) -> None:
    analysis = analyze(run(tmp_path, foreign=False), Thresholds(link_gbps=1.0))
    assert "fabric_contention" not in {f.mode for f in analysis.findings}


def test_the_window_s_tail_joins_the_last_whole_span() -> None:
    """Counter intervals are judged in spans of at least ``SPAN_ITERATIONS``
    iterations; what the window leaves after its last whole span joins that span
    instead of being judged alone (a quarter-span tail once read 27 % of a host link's
    bytes as foreign on the emulated fabric)."""
    iteration_ns, interval = 100 * MS, 100 * MS
    window = (0, 1050 * MS)  # 3.5 spans of 3 iterations
    starts = list(range(0, 1050 * MS, interval))
    rows = pl.DataFrame(
        {
            "carrier": ["h1"] * len(starts),
            "direction": ["tx"] * len(starts),
            "used": [True] * len(starts),
            "sender": ["h1"] * len(starts),
            "receiving": [False] * len(starts),
            "hosts": [["h1"]] * len(starts),
            "rate_bps": [1e9] * len(starts),
            "start_ns": starts,
            "end_ns": [min(s + interval, window[1]) for s in starts],
            "bytes": [1000.0] * len(starts),
        }
    )
    spans = _per_iteration(rows, window, iteration_ns).sort("start_ns")
    assert spans.select("start_ns", "end_ns").rows() == [
        (0, 300 * MS),
        (300 * MS, 600 * MS),
        (600 * MS, 1050 * MS),
    ]
    assert spans["bytes"].to_list() == [3000.0, 3000.0, 5000.0]
