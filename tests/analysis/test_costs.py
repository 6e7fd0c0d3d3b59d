"""The cost model a user can follow: each cause's cost is its replayed saving alone,
the causes together are said beside them in words and figures, symptoms are never
added, and one cause's different costs in two runs are explained."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from syncpace.analysis import analyze
from syncpace.analysis.costs import CauseCost, CostAccount
from syncpace.report import format as fmt
from syncpace.report.html import verdict_html
from syncpace.report.verdict import build_verdict

DATA = Path(__file__).resolve().parents[1] / "data"
DEMO = [DATA / "demo" / "trace", DATA / "demo" / "trace-paced"]
SCENARIOS = sorted(p.name for p in DATA.iterdir() if (p / "rank-00000.meta.json").exists())


@pytest.fixture(scope="module")
def demo():
    return analyze(DEMO)


def _pct(share: float) -> str:
    return f"{share * 100:.0f}%" if share >= 0.1 else f"{share * 100:.1f}%"


def test_each_run_states_its_causes_alone_and_together(demo) -> None:
    data = demo.to_json()["costs"]
    assert "alone" in data["model"] and "need not add up" in data["model"]
    for run, table, account in zip(demo.runs, demo.what_if, data["runs"], strict=True):
        causes = [
            f
            for f in demo.findings
            if f.run == run.run and not f.symptom and f.cost_basis == "replay"
        ]
        assert {c["mode"] for c in account["causes"]} == {"fabric_contention", "straggler"}
        for c in account["causes"]:
            (f,) = [f for f in causes if f.mode == c["mode"]]
            row = table.row(f.evidence["counterfactual"]["name"])
            # the finding's cost, the account's and the what-if row's: one number
            assert c["saving"] == pytest.approx(f.cost, abs=1e-4)
            assert c["saving"] == pytest.approx(row.saving, abs=1e-4)
        together = table.row("all")
        assert account["together"]["saving"] == pytest.approx(together.saving, abs=1e-4)
        fabric, straggler = (
            next(c for c in account["causes"] if c["mode"] == m)
            for m in ("fabric_contention", "straggler")
        )
        total = fabric["saving"] + straggler["saving"]
        slack = together.error + max(fabric["error"], straggler["error"])
        expected = "add" if abs(total - together.saving) <= slack else None
        assert account["relation"] == expected
        assert account["text"].startswith(
            f"together {_pct(together.saving)} ({together.saving_ns / 1e6:.3g} ms of "
            f"{table.base.replayed_ns / 1e6:.3g} ms): fabric contention alone "
            f"{_pct(fabric['saving'])}, straggler alone {_pct(straggler['saving'])}; they add up"
        )
        # symptoms are said, and said not to add
        assert (
            "symptoms of these causes, not added to them: communication-dominated"
            in (account["text"])
        )
        assert {s["mode"] for s in account["symptoms"]} == {"comm_dominated", "poor_overlap"}


def test_one_cause_costing_differently_in_two_runs_is_explained(demo) -> None:
    (straggler,) = [n for n in demo.cost_notes if n.startswith("Straggler: ")]
    rows = []
    for run, table in zip(demo.runs, demo.what_if, strict=True):
        (f,) = [f for f in demo.findings if f.run == run.run and f.mode == "straggler"]
        rows.append((table.row(f.evidence["counterfactual"]["name"]), table.base.replayed_ns))
    (a, base_a), (b, base_b) = rows
    assert straggler.startswith(
        f"Straggler: {_pct(a.saving)} of {DEMO[0]}'s {base_a / 1e6:.3g} ms "
        f"({a.saving_ns / 1e6:.3g} ms), {_pct(b.saving)} of {DEMO[1]}'s {base_b / 1e6:.3g} ms "
        f"({b.saving_ns / 1e6:.3g} ms; paced: its iterations include the pacer's delays)"
    )
    assert straggler.endswith("each run's own saving against its own iteration")


def test_the_verdict_terminal_and_html_say_it(demo) -> None:
    from io import StringIO

    from rich.console import Console

    from syncpace.report.terminal import print_analysis

    verdict = build_verdict(demo)
    assert verdict.costs[0].startswith("trace: together ")
    assert any(line.startswith("Straggler: ") for line in verdict.costs)
    page = verdict_html(verdict)
    assert '<p class="costs"><b>Costs:</b> trace: together ' in page
    out = StringIO()
    print_analysis(analyze(DEMO[0]), Console(file=out, width=200))
    text = out.getvalue()
    assert "costs: together " in text and "they add up" in text
    assert "causes overlap, so costs do not add up" in text
    # the symptoms' figures are in parentheses: no column of causes adds up past 100 %
    title = fmt.mode_title("comm_dominated")
    rows = [line for line in text.splitlines() if f"│ {title.split()[0]}" in line]
    assert rows and "(82%)" in rows[0]


@pytest.mark.parametrize(
    ("together", "relation", "words"),
    [
        (0.50, "overlap", "they overlap: removing one also removes part of another"),
        (0.79, "add", "they add up"),
        (0.95, "compound", "each hides part of the other"),
    ],
)
def test_how_costs_combine_is_said_in_words(together, relation, words) -> None:
    ms = 1e6
    causes = (
        CauseCost("fabric_contention", 0.51, 51 * ms, 0.01, "cross-node links"),
        CauseCost("straggler", 0.28, 28 * ms, 0.01, "rank 2 computing like the others"),
    )
    account = CostAccount(
        "run", 100 * ms, causes, CauseCost("", together, together * 100 * ms, 0.01, "all")
    )
    assert account.relation == relation
    assert account.text().startswith(
        f"together {together * 100:.0f}% ({together * 100:.3g} ms of 100 ms): fabric contention "
        f"alone 51%, straggler alone 28%; {words}"
    )


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_findings_cost_is_its_replayed_saving(name) -> None:
    """Every planted scenario: a replayed finding's cost is its what-if row's saving."""
    analysis = analyze(DATA / name)
    (table,) = analysis.what_if
    json.dumps(analysis.to_json()["costs"])
    for f in analysis.findings:
        if f.cost_basis != "replay":
            continue
        row = table.row(f.evidence["counterfactual"]["name"])
        assert row is not None, f.mode
        assert f.cost == pytest.approx(float(np.clip(row.saving, 0, 1)), abs=1e-12), f.mode
