"""Findings name the source first, then who suffers; one name per link everywhere;
a finding's ranks, nodes and text agree — over every saved planted-cause trace and the
demo's runs (the fabric's link counters included)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from syncpace.analysis import analyze
from syncpace.report import format as fmt
from syncpace.report.merge import merge_findings
from syncpace.report.verdict import build_verdict, where

DATA = Path(__file__).resolve().parents[1] / "data"
RUNS = [p for p in sorted(DATA.iterdir()) if (p / "rank-00000.meta.json").exists()] + [
    DATA / "demo" / "trace",
    DATA / "demo" / "trace-paced",
]
#: A link direction's one name: its kind in words, then from→to.
LINK = re.compile(r"^(host link|uplink) [\w.-]+→[\w.-]+$")


def _ranks_in(text: str) -> set[int]:
    """Every rank the text names ('rank 2', 'ranks 1, 2', 'ranks 2, 6')."""
    out: set[int] = set()
    for m in re.finditer(r"\branks? (\d+(?:, \d+)*)", text):
        out |= {int(x) for x in m.group(1).split(", ")}
    return out


@pytest.mark.parametrize(
    "run", RUNS, ids=lambda p: p.name if p.parent == DATA else p.parent.name + "/" + p.name
)
def test_ranks_nodes_and_text_agree(run: Path) -> None:
    analysis = analyze(run)
    place = analysis.runs[0].placement
    host = dict(zip(place["rank"].to_list(), place["node"].to_list(), strict=True))
    for f in analysis.findings:
        if f.ranks:
            # nodes are the hosts of the ranks the finding places it at
            assert sorted(f.nodes) == sorted({host[r] for r in f.ranks}), f.mode
            # and the text names those ranks, no others
            assert _ranks_in(f.summary) == set(f.ranks), (f.mode, f.summary)
        source = getattr(f, "source", ())  # checked as the rule on any version
        for name in source:
            assert name in f.summary, (f.mode, name, f.summary)
        if source and f.ranks:
            # the source comes first, then who suffers
            first_rank = re.search(r"\branks? \d", f.summary)
            assert f.summary.index(source[0]) < first_rank.start(), f.summary


def test_contention_names_the_host_whose_traffic_crosses_the_link() -> None:
    """The demo: h3 sends greedy flows to h0 and h1 across the spine (demo/job.py's
    CROSS_SPINE); ranks 1 and 2 suffer. The link counters say so in the fixture: h3's
    sending direction and the uplinks are the only host egress and shared links near
    their rate."""
    run = DATA / "demo" / "trace"
    links = pl.read_ipc_stream(run / "fabric-links.arrow")
    assert {"h3", "leaf1", "spine"} <= set(links["src"].to_list())
    analysis = analyze(run)
    (f,) = [f for f in analysis.findings if f.mode == "fabric_contention"]
    assert f.source[0] == "h3"
    assert f.source[1:] == ("host link h3→leaf1", *f.source[2:])
    assert set(f.source[2:]) == {"uplink leaf1→spine", "uplink spine→leaf0"}
    assert f.ranks == (1, 2) and f.nodes == ("h1", "h2")
    sends = re.match(r"h3 sends at (\d+)% of host link h3→leaf1; its traffic crosses ", f.summary)
    # near its rate, never above it (a sample over the link's rate is no measurement)
    assert sends and 90 <= int(sends.group(1)) <= 100, f.summary
    data = json.loads(json.dumps(analysis.to_json()))
    (j,) = [x for x in data["findings"] if x["mode"] == "fabric_contention"]
    assert j["source"] == list(f.source)
    # one name per link, in the evidence, the JSON, the text and the verdict
    links_named = set(j["evidence"]["link_utilisation_share"]) | set(j["evidence"]["link_rate_bps"])
    assert links_named == set(f.source[1:])
    assert all(LINK.match(n) for n in links_named)
    text = json.dumps(data, ensure_ascii=False)
    for other in ("leaf1-spine", "uplink leaf1 spine", "h3-leaf1", "host h3→leaf1"):
        assert other not in text
    verdict = build_verdict(analysis)
    (cause,) = [c for c in verdict.causes if c.mode == "fabric_contention"]
    # one busy figure for all links when they round alike, one each otherwise
    assert re.match(r"source: h3 — host link h3→leaf1( \d+% busy)?, uplink ", cause.where), (
        cause.where
    )
    assert "; suffers: ranks 1 (h1, local rank 0), 2 (h2, local rank 0)" in cause.where
    (m,) = [m for m in merge_findings(analysis) if m.mode == "fabric_contention"]
    places = fmt.Places.of(analysis.runs[0].placement)
    assert where(m, places) == cause.where


def test_the_link_heatmap_uses_the_same_names() -> None:
    from syncpace.report.extras import link_utilisation_figure

    fig = link_utilisation_figure(DATA / "demo" / "trace" / "fabric-links.arrow")
    names = set(fig.data[0].y)
    assert "uplink leaf1→spine" in names and "host link h3→leaf1" in names
    assert all(LINK.match(n) for n in names)


def _synthetic(tmp_path: Path) -> dict[str, Path]:
    """Synthetic jobs (tests/analysis/test_mechanisms.py's) of the kinds the saved
    traces lack: a whole slow node, a one-off stall, a slow link, contention."""
    from test_mechanisms import FOUR_HOSTS, TWO_BY_TWO, job

    stall = lambda r, s: 40.0 + (3000.0 if (r, s) == (1, 20) else 0.0)  # noqa: E731
    return {
        "whole-node": job(
            tmp_path / "a", hosts=TWO_BY_TWO, compute=lambda r, s: 40.0 + 10 * (r >= 2)
        ),
        "stall": job(tmp_path / "b", hosts=FOUR_HOSTS, compute=stall),
        "slow-link": job(tmp_path / "c", hosts=FOUR_HOSTS, lag=lambda r, s: 8.0 * (r in (0, 1))),
        "contention": job(
            tmp_path / "d", hosts=FOUR_HOSTS, transfer=lambda s: 4.0 if s < 14 else 12.0
        ),
    }


def test_ranks_nodes_and_text_agree_for_the_other_kinds(tmp_path: Path) -> None:
    seen = set()
    for name, run in _synthetic(tmp_path).items():
        analysis = analyze(run)
        place = analysis.runs[0].placement
        host = dict(zip(place["rank"].to_list(), place["node"].to_list(), strict=True))
        for f in analysis.findings:
            seen.add(f.mode)
            if f.ranks:
                assert sorted(f.nodes) == sorted({host[r] for r in f.ranks}), (name, f.mode)
                assert _ranks_in(f.summary) == set(f.ranks), (name, f.mode, f.summary)
    assert {"straggler", "stall", "slow_link", "fabric_contention"} <= seen
