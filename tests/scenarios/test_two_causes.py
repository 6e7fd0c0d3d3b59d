"""Two planted causes at once, scored as the draws score them: the replay without both
planted causes (``suite.predict_together``) against the truth from outside the
analysis, the same job rerun without them. The job's own shape (its gradients sent
after backward: a poor overlap that the rerun keeps) must stay in the prediction;
"all causes found removed" takes it too.

Traces are written with the real writer (``tests/planted.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite  # noqa: E402

from planted import Planted, generate  # noqa: E402
from syncpace.analysis import analyze  # noqa: E402

#: One job shape: 8 ranks on 2 nodes, its buckets sent after backward, 40 steps.
SHAPE = {"nodes": 2, "gpus_per_node": 4, "steps": 40, "jitter": 0.05, "overlap": False}
CLEAN = Planted(name="clean", **SHAPE)
#: Rank 1 computes 40 % more every step, rank 5 stops for 300 ms in step 20.
BOTH = CLEAN.replace(name="both", slow_ranks=((1, 1.4),), stalls=((5, 20, 300.0),))


def test_two_planted_causes_are_predicted_without_the_jobs_own_shape(tmp_path):
    planted = analyze(generate(BOTH, tmp_path / "both"))
    clean = analyze(generate(CLEAN, tmp_path / "clean"))
    for f in planted.findings:
        print(f.mode, round(f.cost, 4), f.ranks, f.summary)
    modes = {f.mode for f in planted.findings}
    assert {"straggler", "stall", "poor_overlap"} <= modes
    truth_ms = clean.runs[0].iteration_ns / 1e6
    measured_ms = planted.runs[0].iteration_ns / 1e6
    predicted = suite.predict_together(planted, [("straggler", "straggler:1"), ("stall", "stall")])
    everything = planted.what_if[0].row("all").iteration_ns / 1e6
    print(
        f"measured {measured_ms:.2f}, rerun {truth_ms:.2f}, "
        f"planted removed {predicted:.2f}, all removed {everything:.2f} ms"
    )
    # the plants cost something, and the prediction is the rerun's within 2 points
    assert measured_ms > 1.1 * truth_ms
    assert predicted == pytest.approx(truth_ms, rel=0.02)
    # removing everything found, the job's shape too, is well below the rerun
    assert everything < 0.95 * truth_ms
