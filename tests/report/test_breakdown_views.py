"""The per-operation table and the per-rank breakdown where a user reads them:
`syncpace trace-info` and `syncpace diagnose` (terminal and --json) and the HTML report
(tables and per-step stacked bars). The run is tests/known_run.py: every figure expected
here is arithmetic on the durations it planted, after the one warm-up iteration both
verbs leave out."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

import known_run as k
from syncpace.cli.main import main

ANALYSED = range(1, k.STEPS)
N = len(ANALYSED)


def _ms(x: float) -> str:
    return f"{x:g} ms"


def _wait_ms(rank: int) -> float:
    return (k.LAST_ARRIVAL_MS - k.COMPUTE_MS[rank]) * N


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return k.write(tmp_path_factory.mktemp("known") / "run")


def _expected_rows() -> list[str]:
    """The rank rows as the tables print them: share · time of each part."""
    run = k.STEP_MS * N
    exposed = sum(k.TRANSFER_MS[s] for s in ANALYSED)
    rows = []
    for rank in range(k.WORLD):
        wait = _wait_ms(rank)
        compute = run - wait - exposed
        rows.append(
            f"{rank} ({k.HOST})  {_ms(run)}  {round(100 * compute / run)}% · {_ms(compute)}"
            f"  {round(100 * exposed / run)}% · {_ms(exposed)}"
            f"  {round(100 * wait / run)}% · {_ms(wait)}"
        )
    return rows


def _values(data) -> list[float]:
    """A figure's array as plotly's JSON holds it: a list, or typed binary (base64)."""
    if isinstance(data, dict):
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).tolist()
    return list(data)


def _squeeze(text: str) -> str:
    return re.sub(r" {2,}", "  ", text)


def _check_text(out: str) -> None:
    lines = [_squeeze(line.strip()) for line in out.splitlines()]
    total = sum(k.TRANSFER_MS[s] for s in ANALYSED)
    assert any(line.startswith(f"all_reduce  1–16 MiB  {N}  {_ms(total)}  ") for line in lines), out
    assert any(line.startswith(f"broadcast  < 64 KiB  {N}  ") for line in lines), out
    for row in _expected_rows():
        assert row in lines, (row, out)
    assert "add up to 100% of every rank's run" in out


def test_trace_info_prints_both_tables(run_dir, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["trace-info", str(run_dir)]) == 0
    out = capsys.readouterr().out
    _check_text(out)
    table_lines = [line for line in out.splitlines() if "·" in line or "Gbit/s" in line]
    assert table_lines and max(len(line) for line in table_lines) <= 80


def test_trace_info_json_has_the_breakdown(run_dir, capsys):
    assert main(["trace-info", str(run_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["breakdown"]
    ranks = {r["rank"]: r for r in data["ranks"]}
    assert ranks[0]["wait_ms"] == pytest.approx(_wait_ms(0))
    assert data["shares_add_up"] is True and data["warmup_steps"] == 1
    ops = {r["op"]: r for r in data["operations"]}
    assert ops["all_reduce"]["calls"] == N


def test_diagnose_prints_both_tables(run_dir, capsys):
    assert main(["diagnose", str(run_dir)]) == 0
    _check_text(capsys.readouterr().out)


def test_diagnose_json_has_the_breakdown_of_each_run(run_dir, capsys):
    assert main(["diagnose", str(run_dir), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)["metrics"]["runs"][0]["breakdown"]
    ranks = {r["rank"]: r for r in view["ranks"]}
    for rank in range(k.WORLD):
        assert ranks[rank]["wait_ms"] == pytest.approx(_wait_ms(rank))
        assert ranks[rank]["sum_of_shares"] == pytest.approx(1.0)
    ops = {r["op"]: r for r in view["operations"]}
    times = [k.TRANSFER_MS[s] for s in ANALYSED]
    assert ops["all_reduce"]["total_ms"] == pytest.approx(sum(times))
    assert ops["all_reduce"]["p99_ms"] == pytest.approx(np.percentile(times, 99))
    assert [s["step"] for s in view["steps"]] == list(ANALYSED)


def test_the_report_has_the_tables_and_per_step_stacked_bars(run_dir, tmp_path):
    pytest.importorskip("plotly")
    out = tmp_path / "report.html"
    assert main(["report", str(run_dir), "-o", str(out)]) == 0
    page = out.read_text()
    section = page[page.index('<section id="breakdown">') :]
    section = section[: section.index("</section>")]
    cells = re.findall(r"<td>([^<]*)</td>", section.replace("&lt;", "<"))
    assert cells[:3] == ["all_reduce", "1–16 MiB", str(N)]
    wait = _wait_ms(0)
    assert f"{round(100 * wait / (k.STEP_MS * N))}% · {_ms(wait)}" in cells
    figure_id = re.search(r'data-figure="(fig-\d+)"', section).group(1)
    spec = re.search(rf'<script type="application/json" id="{figure_id}">(.*?)</script>', page)
    figure = json.loads(spec.group(1))
    assert figure["layout"]["barmode"] == "stack"
    bars = {t["name"]: t for t in figure["data"]}
    assert set(bars) == {"compute", "exposed communication", "waiting for the last rank"}
    ys = {name: _values(bar["y"]) for name, bar in bars.items()}
    assert _values(bars["compute"]["x"]) == list(ANALYSED)
    mean_wait = sum(k.LAST_ARRIVAL_MS - c for c in k.COMPUTE_MS) / k.WORLD
    for i, step in enumerate(ANALYSED):
        assert ys["exposed communication"][i] == pytest.approx(k.TRANSFER_MS[step])
        assert ys["waiting for the last rank"][i] == pytest.approx(mean_wait)
        stacked = sum(y[i] for y in ys.values())
        assert stacked == pytest.approx(k.STEP_MS)
