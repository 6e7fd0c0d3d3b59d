"""The rank's Prometheus exposition follows Prometheus' naming conventions, checked on
the text a real endpoint serves: `promtool check metrics` accepts it, every counter is
typed counter and ends in `_total`, every other series names its unit, and the example
dashboard, the alert rules and docs/monitoring.md use exactly the names served."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

from multirank import free_port  # noqa: E402
from syncpace.capture.metrics import PrometheusMetrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "examples" / "grafana" / "syncpace-dashboard.json"
ALERTS = ROOT / "examples" / "prometheus" / "syncpace-alerts.yml"
DOCS = ROOT / "docs" / "monitoring.md"
#: the base units of Prometheus' conventions, and `_ratio` for shares from 0 to 1
UNITS = ("_seconds", "_bytes", "_bytes_per_second", "_ratio")


@pytest.fixture(scope="module")
def exposition() -> str:
    """What a scraper reads from one rank after a step with a collective and a window."""
    metrics = PrometheusMetrics(free_port(), "127.0.0.1", rank=1, host="vm", local_rank=1)
    try:
        metrics.on_collective("0", "all_reduce", 4 << 20, 0.002, group_size=4)
        metrics.on_step(0, 0.05)
        metrics.on_collective("0", "all_reduce", 4 << 20, 0.002, group_size=4)
        metrics.on_step(1, 0.05)
        metrics.on_window(0.004, 0.1, 0.12)
        return urllib.request.urlopen(metrics.url, timeout=10).read().decode()
    finally:
        metrics.close()


def _types(text: str) -> dict[str, str]:
    """Family name -> type, as the `# TYPE` lines declare them (the client library's
    `_created` timestamps of counters and histograms left aside)."""
    pairs = (line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE syncpace_"))
    return {name: kind for name, kind in pairs if not name.endswith("_created")}


def _served(text: str) -> set[str]:
    """Every series name a query can select (histograms' `_bucket`/`_sum`/`_count`)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("syncpace_"):
            names.add(re.match(r"[a-z_]+", line).group(0))
    return {n for n in names if not n.endswith("_created")}


def test_promtool_accepts_the_exposition(exposition, tmp_path):
    promtool = shutil.which("promtool") or (
        "/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None
    )
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install -y prometheus): no lint")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=exposition, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.strip() == "", check.stdout  # promtool prints lint problems here


def test_counters_end_in_total_and_everything_else_names_its_unit(exposition):
    types = _types(exposition)
    # the iteration count only grows: a counter, as rate() and increase() expect
    assert types.get("syncpace_steps_total") == "counter", types
    assert "syncpace_step" not in _served(exposition)
    assert 'syncpace_steps_total{host="vm",local_rank="1",rank="1"} 2.0' in exposition
    for family, kind in types.items():
        if kind == "counter":
            assert family.endswith("_total"), f"counter {family} does not end in _total"
            unit = family.removesuffix("_total")
            assert unit.endswith(("_calls", "_steps")) or unit.endswith(UNITS), family
        else:
            assert not family.endswith("_total"), f"{family} is a {kind}, named as a counter"
            assert family.endswith(UNITS), f"{family} ({kind}) has no unit in its name"
    assert types.get("syncpace_finding_cost_ratio") == "gauge"
    assert 'mode="straggler"' in exposition and "syncpace_finding{" not in exposition


def _queried(text: str) -> set[str]:
    return set(re.findall(r"\bsyncpace_[a-z_]+", text))


def test_the_dashboard_and_the_alerts_query_only_served_names(exposition):
    served = _served(exposition)
    exprs = []
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        exprs += [t["expr"] for t in panel.get("targets", [])]
    exprs += [v.get("query", "") for v in dashboard.get("templating", {}).get("list", [])]
    queried = _queried("\n".join(exprs)) | _queried(ALERTS.read_text())
    assert "syncpace_collective_busbw_bytes_per_second" in queried
    assert queried - served == set(), f"queried but not served: {queried - served}"


def test_the_docs_list_every_metric_served(exposition):
    table = {
        m.group(1)
        for m in re.finditer(r"^\| `(syncpace_[a-z_]+)` \|", DOCS.read_text(), re.MULTILINE)
    }
    families = set(_types(exposition))
    assert families - table == set(), f"served but not in docs/monitoring.md: {families - table}"
    assert table - families == set(), f"in docs/monitoring.md but not served: {table - families}"
