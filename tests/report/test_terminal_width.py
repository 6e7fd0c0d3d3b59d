"""``diagnose`` at 80 columns: each finding in a handful of lines, no jargon left
unexplained, an A/B verdict that cannot read as a contradiction."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from syncpace.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"
DEMO = [str(DATA / "demo" / "trace"), str(DATA / "demo" / "trace-paced")]
#: At most this many lines per finding at 80 columns (32 before the list layout; the
#: longest, fabric contention, names its source host, its links and who suffers).
HANDFUL = 8


def _diagnose(monkeypatch, capsys, *runs: str) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["diagnose", *runs]) == 0
    return capsys.readouterr().out


def _finding_blocks(out: str) -> list[list[str]]:
    """The numbered findings after the verdict, each with its lines."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("╰"))
    blocks: list[list[str]] = []
    for line in lines[start + 1 :]:
        if re.match(r"\d+\. ", line):
            blocks.append([line])
        elif blocks and line.startswith("   "):
            blocks[-1].append(line)
        elif blocks:
            break
    return blocks


@pytest.mark.parametrize("runs", [DEMO, [str(DATA / "straggler")]], ids=["demo", "planted"])
def test_a_finding_fits_in_a_handful_of_lines_at_80_columns(runs, monkeypatch, capsys) -> None:
    out = _diagnose(monkeypatch, capsys, *runs)
    blocks = _finding_blocks(out)
    assert len(blocks) >= len(runs)  # the demo has four, the planted straggler one
    for block in blocks:
        assert len(block) <= HANDFUL, "\n".join(block)
        assert all(len(line.rstrip()) <= 80 for line in block), "\n".join(block)
        assert re.search(r"how sure: (high|medium|low) \(\d\.\d\d\)", "\n".join(block))
    titles = [re.sub(r"^\d+\. ", "", b[0]).split(" · ")[0] for b in blocks]
    assert "Straggler" in titles  # registered titles, not mode names
    assert not any("_" in t for t in titles)


def test_jargon_is_explained_or_replaced(monkeypatch, capsys) -> None:
    out = _diagnose(monkeypatch, capsys, *DEMO)
    assert "conf." not in out and "no_help" not in out
    assert "varies ±22% (CV)" in out
    flat = " ".join(out.split())
    assert "CV: the iterations' standard deviation over their mean" in flat
    assert "Exposed: communication time not hidden behind compute" in flat
    # the paced run's A/B verdict: a gain it did not trust is said to be untrusted
    assert "A/B turned off: throughput +23% paced against unpaced, but too uncertain" in flat
