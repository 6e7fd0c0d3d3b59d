"""Traffic that is not the job's, found from the link counters interval by interval.

A 2 x 2 leaf-spine (h0, h1 under leaf0; h2, h3 under leaf1) runs a 4-rank ring; h4
under leaf0 sends a fixed 0.6 GB/s to h5 under leaf1 across the spine, whose uplinks
carry 1 GB/s: the job's ring crosses both and gets what is left, 0.4 GB/s, so each
transfer takes 2.5 times its time at the links' rate. All run long, the run's best
transfer is as slow as the rest; the counters carry the foreign bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.analysis.slowedring import slowed_ring
from tests.linkcounters import Direction, write_links

from syncpace.analysis import analyze

MS = 1_000_000
NBYTES = 8 << 20
RATE_BPS = 8_000_000_000  # 1 GB/s, host links and uplinks alike
PER_HOST = NBYTES * 1.5  # an all-reduce of 4 ranks: 2(n-1)/n of its bytes per host link
AT_RATE_MS = PER_HOST / 1e9 * 1e3
FOREIGN_GBPS = 0.6
SLOWER = 1 / (1 - FOREIGN_GBPS)  # the job's share of the uplinks: 0.4 of 1 GB/s
COMPUTE_MS, AFTER_MS, STEPS = 20.0, 1.0, 40
HOSTS = ["h0", "h1", "h2", "h3"]
LEAF = {"h0": "leaf0", "h1": "leaf0", "h4": "leaf0", "h2": "leaf1", "h3": "leaf1", "h5": "leaf1"}


def directions() -> list[Direction]:
    out: list[Direction] = []
    for h, leaf in LEAF.items():
        out += [
            (f"{h}-{leaf}", h, leaf, "host", RATE_BPS),
            (f"{h}-{leaf}", leaf, h, "host", RATE_BPS),
        ]
    for leaf in ("leaf0", "leaf1"):
        link = f"{leaf}-spine"
        out += [
            (link, leaf, "spine", "uplink", RATE_BPS),
            (link, "spine", leaf, "uplink", RATE_BPS),
        ]
    return out


def run(root: Path, foreign: tuple[float, float] | None) -> tuple[Path, float]:
    """The ring, each transfer whose middle falls while h4 sends (``foreign``: from, to
    in ms, on the counters' 100 ms grid; ``None``: never) 2.5x slower; the link
    counters of every direction every 100 ms. Returns the run and the same job's mean
    iteration with no foreign traffic (by construction)."""
    own, other, t = slowed_ring(
        root,
        hosts=HOSTS,
        steps=STEPS,
        compute_ms=COMPUTE_MS,
        after_ms=AFTER_MS,
        nbytes=NBYTES,
        per_host=PER_HOST,
        bytes_ms=AT_RATE_MS,
        slower=SLOWER,
        foreign=foreign,
        foreign_per_ms=FOREIGN_GBPS * 1e6,  # GB/s x ms
    )

    def nbytes(d: Direction, t_ns: int) -> int:
        _, src, dst, kind, _ = d
        t_ms = t_ns / MS
        if kind == "host" and {src, dst} & set(HOSTS):
            return int(own(t_ms))  # a job host's link: the job's bytes each way
        if kind == "uplink":  # the ring crosses each uplink once each way, beside h4's bytes
            return int(own(t_ms) + other(t_ms))
        if (src, dst) in (("h4", "leaf0"), ("leaf1", "h5")):
            return int(other(t_ms))
        return 0

    write_links(root, directions(), range(0, int((t + 200) * MS), 100 * MS), nbytes)
    return root, COMPUTE_MS + AT_RATE_MS + AFTER_MS


def test_foreign_traffic_all_run_long_is_contention_from_its_sender(tmp_path: Path) -> None:
    root, healthy_ms = run(tmp_path, foreign=(0.0, 1e9))
    analysis = analyze(root)
    top = analysis.top
    assert top.mode == "fabric_contention", [f.summary for f in analysis.findings]
    assert top.source[0] == "h4"
    assert {"uplink leaf0→spine", "uplink spine→leaf1"} <= set(top.source)
    assert not {"h0", "h1", "h2", "h3"} & set(top.source)
    ev = top.evidence
    assert ev["foreign_senders"] == ["h4"]
    assert ev["foreign_time_share"] == pytest.approx(1.0, abs=0.02)
    # 2.5x the links' rate: against the hosts' declared 1 GB/s, not the run's best
    assert ev["slower_beside_foreign"] == pytest.approx(SLOWER, rel=0.02)
    assert ev["baseline"] == "the hosts' link rate, 8 Gbit/s"
    # each uplink direction: h4's 0.6 GB/s beside the ring's, against an upper bound of
    # the job's own there (both hosts below the leaf): 1 - 2 x job / counted
    iteration_ms = COMPUTE_MS + SLOWER * AT_RATE_MS + AFTER_MS
    job_gbps = PER_HOST / (iteration_ms * 1e6)
    share = 1 - 2 * job_gbps / (job_gbps + FOREIGN_GBPS)
    assert ev["foreign_share_by_carrier"]["uplink leaf0→spine"] == pytest.approx(share, abs=0.03)
    assert top.cost == pytest.approx(1 - healthy_ms / iteration_ms, abs=0.01)
    assert "h4 sends traffic that is not the job's over uplink" in top.summary
    assert (
        "cross-node transfers beside it are 2.50x slower than at the hosts' link rate"
        in top.summary
    )
    assert "bandwidth_bound" not in {f.mode for f in analysis.findings}


def test_foreign_traffic_in_part_of_the_run_is_costed_against_the_rest(tmp_path: Path) -> None:
    """h4 sends from 0.6 s to 1.4 s, about the middle 40 % of the run: the transfers outside are the
    baseline, and only those in its intervals are costed."""
    root, healthy_ms = run(tmp_path, foreign=(600.0, 1400.0))
    analysis = analyze(root)
    (finding,) = [f for f in analysis.findings if f.mode == "fabric_contention"]
    ev = finding.evidence
    assert finding.source[0] == "h4"
    assert ev["baseline"] == "their own pace outside those intervals"
    assert ev["slower_beside_foreign"] == pytest.approx(SLOWER, rel=0.02)
    table = analysis.what_if[0]
    row = table.row("links:beside")
    # every slowed step back at the clean transfer: the replayed iteration is the clean one
    assert row.iteration_ns / 1e6 == pytest.approx(healthy_ms, rel=0.01)


def test_the_jobs_own_bytes_on_the_uplinks_are_no_foreign_traffic(tmp_path: Path) -> None:
    root, _ = run(tmp_path, foreign=None)
    analysis = analyze(root)
    assert "fabric_contention" not in {f.mode for f in analysis.findings}
