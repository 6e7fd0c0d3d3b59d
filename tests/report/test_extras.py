"""The report shows benchmark results and fabric link counters left in a run directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from syncpace.analysis.api import analyze
from syncpace.fabric.counters import arrow_schema
from syncpace.report.extras import link_utilisation_figure, run_extras
from syncpace.report.html import render_html

# what the report draws from a run, never how fast it ran: they hold at any CPU load
pytestmark = pytest.mark.untimed

RATE = 100_000_000  # bit/s


def write_links(path: Path, fraction: float) -> None:
    """Two samples one second apart: the uplink moved `fraction` of its rate, h0 nothing."""
    schema = arrow_schema()
    rows = []
    for t, moved in ((0, 0), (1, 1)):
        for link, kind, src, dst, share in (
            ("up0", "uplink", "leaf0", "spine", fraction),
            ("h0", "host", "h0", "leaf0", 0.0),
        ):
            nbytes = int(moved * share * RATE / 8)
            rows.append(
                {
                    "time_ns": t * 10**9,
                    "link": link,
                    "src": src,
                    "dst": dst,
                    "kind": kind,
                    "rate_bps": RATE,
                    "bytes": nbytes,
                    "packets": 0,
                    "drops": 0,
                    "overlimits": 0,
                    "backlog_bytes": 0,
                }
            )
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(pa.Table.from_pylist(rows, schema=schema))


def test_link_utilisation_is_bytes_over_rate(tmp_path):
    write_links(tmp_path / "fabric-links.arrow", 0.8)
    fig = link_utilisation_figure(tmp_path / "fabric-links.arrow")
    heat = fig.data[0]
    values = dict(zip(heat.y, [row[0] for row in heat.z], strict=True))
    assert values["uplink leaf0→spine"] == pytest.approx(0.8, rel=1e-3)
    assert values["host link h0→leaf0"] == 0.0


def test_damaged_counters_become_a_note(tmp_path):
    (tmp_path / "fabric-links.arrow").write_bytes(b"garbage")
    (tmp_path / "bench.json").write_text("{}")
    figures, notes = run_extras(tmp_path)
    assert figures == []
    assert len(notes) == 2 and "fabric-links.arrow: not shown" in notes[1]
    assert "bench.json: not shown" in notes[0]


@pytest.mark.multirank
def test_bench_run_report_has_the_pair_heatmap(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "syncpace",
            "bench",
            "--nproc",
            "2",
            "-b",
            "1K",
            "-e",
            "8K",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--out",
            str(out),
            "all_reduce",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures, notes = run_extras(out)
    titles = [t for t, _ in figures]
    assert notes == []
    assert any(t.startswith("Pairwise bandwidth") for t in titles)
    assert any(t.startswith("Benchmark busbw") for t in titles)
    page = render_html(analyze([out]))
    assert "Pairwise bandwidth" in page
