"""Which ends of the fabric's links are hosts: a leaf with one host below it ends one
host link, like a host, and is told apart by its uplink.

The same job on a leaf-spine with one host per leaf, with traffic that is not the job's
sent from its own hosts across the spine all run long: every host link and uplink it
crosses carries the foreign bytes, and the finding names the hosts that send them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.analysis.slowedring import slowed_ring
from tests.linkcounters import Direction, write_links

from syncpace.analysis import analyze
from syncpace.analysis.links import host_ends, host_link_rates

MS = 1_000_000
NBYTES = 8 << 20
RATE_BPS = 8_000_000_000  # 1 GB/s, host links and uplinks alike
PER_HOST = NBYTES  # an all-reduce of 2 ranks: 2(n-1)/n of its bytes per host link
AT_RATE_MS = PER_HOST / 1e9 * 1e3
FOREIGN_GBPS = 0.6
SLOWER = 1 / (1 - FOREIGN_GBPS)
LEAF = {"h0": "leaf0", "h1": "leaf1"}


def leaf_spine(leaf: dict[str, str], both: bool = True) -> list[Direction]:
    out: list[Direction] = []
    for h, sw in leaf.items():
        out += [(f"{h}-{sw}", h, sw, "host", RATE_BPS)]
        out += [(f"{h}-{sw}", sw, h, "host", RATE_BPS)] if both else []
    for sw in sorted(set(leaf.values())):
        out += [(f"{sw}-spine", sw, "spine", "uplink", RATE_BPS)]
        out += [(f"{sw}-spine", "spine", sw, "uplink", RATE_BPS)] if both else []
    return out


@pytest.mark.parametrize("both", [True, False], ids=["both directions", "one direction"])
@pytest.mark.parametrize(
    "leaf",
    [LEAF, {"h0": "leaf0", "h1": "leaf0", "h2": "leaf1"}, {"h0": "leaf0", "h1": "leaf0"}],
    ids=["one host per leaf", "one and two", "one leaf"],
)
def test_the_hosts_are_the_ends_of_one_link(leaf: dict[str, str], both: bool) -> None:
    links = [(kind, src, dst) for _, src, dst, kind, _ in leaf_spine(leaf, both)]
    assert host_ends(links) == set(leaf)


def test_a_star_s_hosts() -> None:
    links = [("host", h, "sw") for h in ("h0", "h1", "h2")] + [("host", "sw", "h0")]
    assert host_ends(links) == {"h0", "h1", "h2"}


def run(root: Path) -> tuple[Path, float]:
    own, other, t = slowed_ring(
        root,
        hosts=list(LEAF),
        steps=40,
        compute_ms=20.0,
        after_ms=1.0,
        nbytes=NBYTES,
        per_host=PER_HOST,
        bytes_ms=AT_RATE_MS,
        slower=SLOWER,
        foreign=(0.0, 1e9),
        foreign_per_ms=FOREIGN_GBPS * 1e6,  # GB/s x ms
    )

    def nbytes(d: Direction, t_ns: int) -> int:
        _, src, dst, _, _ = d
        t_ms = t_ns / MS
        # h0 sends to h1 beside the job: every direction from h0's side towards h1's
        # carries it, the reverse only the job's bytes
        towards = (src, dst) in (("h0", "leaf0"), ("leaf0", "spine"), ("spine", "leaf1"))
        return int(own(t_ms) + (other(t_ms) if towards or dst == "h1" else 0))

    write_links(root, leaf_spine(LEAF), range(0, int((t + 200) * MS), 100 * MS), nbytes)
    return root, 20.0 + AT_RATE_MS + 1.0


def test_a_leaf_with_one_host_is_no_host_of_the_job(tmp_path: Path) -> None:
    root, healthy_ms = run(tmp_path)
    rates = host_link_rates(root, None)
    assert rates == {"h0": RATE_BPS, "h1": RATE_BPS}
    analysis = analyze(root)
    top = analysis.top
    assert top.mode == "fabric_contention", [f.summary for f in analysis.findings]
    ev = top.evidence
    assert ev["foreign_senders"] == ["h0"]
    assert ev["slower_beside_foreign"] == pytest.approx(SLOWER, rel=0.02)
    assert "leaf0" not in ev["foreign_senders"] and "leaf1" not in top.source
    iteration_ms = 20.0 + SLOWER * AT_RATE_MS + 1.0
    assert top.cost == pytest.approx(1 - healthy_ms / iteration_ms, abs=0.01)
