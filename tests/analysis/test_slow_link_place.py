"""A slow link names a host only where that host stands out in each half of the run.

Built jobs (``tests/analysis/test_mechanisms.job``: each rank's collectives end ``lag``
ms after the others'): the truth is which ranks were planted to see their collectives
end late, and when. One rank on every host ending late is no host's link; the ranks
next to one slow link all run long still name it.
"""

from __future__ import annotations

from pathlib import Path

from tests.analysis.test_mechanisms import FOUR_HOSTS, job
from tests.linkcounters import star, write_links

from syncpace.analysis import Thresholds, analyze, costs

#: three hosts, two ranks each, as the drawn fabric jobs of six ranks
THREE_BY_TWO = ["h0", "h0", "h1", "h1", "h2", "h2"]
LAG_MS = 8.0


def _slow_link(path: Path):
    found = [f for f in analyze(path).findings if f.mode == "slow_link"]
    for f in found:
        print(f.severity.name, round(f.cost, 4), f.nodes, f.ranks, f.summary)
    return found


def test_collectives_ending_late_on_every_host_are_no_hosts_link(tmp_path: Path) -> None:
    """Ranks 0, 2 and 4, one on each host, see every collective end 8 ms late and the
    link counters show every host link at the same rate: not "a slow link on h0, h1,
    h2". The finding names no rank and every host, says no host stands out, and takes
    the shared severity rule on its replayed saving."""
    lag = lambda r, s: LAG_MS if r in (0, 2, 4) else 0.0  # noqa: E731
    path = job(tmp_path, hosts=THREE_BY_TWO, lag=lag)
    write_links(
        path, star(sorted(set(THREE_BY_TWO)), lambda h: 8_000_000_000), range(0, 10**10, 10**9)
    )
    (found,) = _slow_link(path)
    assert found.ranks == ()
    assert found.nodes == ("h0", "h1", "h2")
    assert found.evidence["placed"] is False
    assert found.evidence["lagging_ranks"] == [0, 2, 4]
    assert found.summary.startswith("slow transfers, not one host's link")
    assert "on every host at once — ranks 0, 2, 4 (h0, h1, h2) over the run" in found.summary
    assert "every host's link at 8 Gbit/s (link counters)" in found.summary
    assert found.severity == costs.severity(found.cost, found.cost_error, Thresholds())
    assert "do not move the job off one host" in " ".join(found.actions)


def test_a_link_slow_all_run_long_still_names_its_ranks(tmp_path: Path) -> None:
    """The ranks next to one slow link see every collective end late in both halves:
    the link of node0 and node1, ranks 0 and 1, as before."""
    lag = lambda r, s: LAG_MS if r in (0, 1) else 0.0  # noqa: E731
    (found,) = _slow_link(job(tmp_path, hosts=FOUR_HOSTS, lag=lag))
    assert found.ranks == (0, 1) and found.nodes == ("node0", "node1")
    assert "placed" not in found.evidence


def test_on_two_hosts_the_rank_ending_last_names_no_link(tmp_path: Path) -> None:
    """Four ranks on two hosts, rank 1 seeing every collective end 8 ms late, the link
    counters showing both host links at one rate: every cross-node transfer crosses
    both links, so the rank ending last is the ring's shape, not a slow link's. No
    slow link (the same lag on four hosts names one: the test above)."""
    hosts = ["h0", "h0", "h1", "h1"]
    lag = lambda r, s: LAG_MS if r == 1 else 0.0  # noqa: E731
    path = job(tmp_path, hosts=hosts, lag=lag)
    write_links(path, star(["h0", "h1"], lambda h: 8_000_000_000), range(0, 10**10, 10**9))
    assert _slow_link(path) == []
