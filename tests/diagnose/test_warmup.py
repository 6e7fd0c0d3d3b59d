"""--warmup-steps checked against the run, and confidence that falls with the
iterations left to analyse."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from syncpace.cli.main import main
from syncpace.diagnose import DiagnoseSettings, diagnose_runs

#: The demo's traced run: 44 iterations, rank 2 planted late in every one of them.
DEMO = Path(__file__).resolve().parents[1] / "data" / "demo" / "trace"


@pytest.mark.parametrize("warmup", ["44", "50"])
def test_a_warmup_beyond_the_run_is_a_clear_error(warmup, capsys) -> None:
    for verb in (["diagnose"], ["report", "-o", "/tmp/never-written.html", "--force"]):
        assert main([verb[0], str(DEMO), "--warmup-steps", warmup, *verb[1:]]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"syncpace {verb[0]}: error: --warmup-steps {warmup} leaves nothing of {DEMO} to "
            "analyse: it has 44 iterations; give fewer warm-up iterations"
        ]
    assert not Path("/tmp/never-written.html").exists()


def _straggler_confidence(warmup: int) -> float:
    analysis = diagnose_runs([str(DEMO)], DiagnoseSettings(warmup_steps=warmup))
    assert analysis.runs[0].quality["steps_analyzed"] == 44 - warmup
    (straggler,) = [f for f in analysis.findings if f.mode == "straggler"]
    assert straggler.ranks == (2,)
    return straggler.confidence


def test_confidence_falls_with_the_iterations_left() -> None:
    full = _straggler_confidence(1)  # 43 iterations: sure
    assert full == 1.0
    # 2 and 8 iterations of the 20 a finding needs: sqrt(2/20), sqrt(8/20) of it
    assert _straggler_confidence(42) == pytest.approx(math.sqrt(2 / 20), abs=0.002)
    assert _straggler_confidence(36) == pytest.approx(math.sqrt(8 / 20), abs=0.002)


def test_the_verdict_says_how_sure_with_few_iterations(capsys) -> None:
    assert main(["diagnose", str(DEMO), "--warmup-steps", "42"]) == 0
    out = capsys.readouterr().out
    # the straggler, read from 2 iterations, in the verdict and in the findings
    assert "where: rank 2 (h2, local rank 0) · how sure: low (0.32)" in out
    assert "how sure: low (0.32) · where: rank 2 (h2, local rank 0)" in out
    assert "how sure: high (1.00) · where: rank 2" not in out
