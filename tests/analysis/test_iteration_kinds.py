"""Iterations of another kind (an evaluation pass every k steps) told apart.

The traces are written with the real writer (tests/planted.py): 3 gradient buckets per
training iteration, and every k-th step an evaluation pass of 10 small all-reduces and
about as much compute again, its batches of uneven length on each rank.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from planted import SCENARIOS, generate
from syncpace.analysis import kinds
from syncpace.analysis.api import analyze
from syncpace.analysis.metrics import compute_metrics
from syncpace.analysis.streaming import same_metrics, stream_metrics
from syncpace.report.terminal import print_analysis
from syncpace.trace.reader import load_trace

EVAL = SCENARIOS["healthy"].replace(name="eval", buckets=3, eval_every=4, steps=40)


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(EVAL, tmp_path_factory.mktemp("eval"))


def test_an_evaluation_every_k_steps_is_not_jitter(eval_run: Path) -> None:
    analysis = analyze([eval_run])
    modes = [f.mode for f in analysis.findings]
    assert "sync_amplification" not in modes
    run = analysis.runs[0]
    # the figures are the training iterations': 40 steps, warm-up 1, every 4th is eval
    planted = [s for s in range(1, 40) if s % 4 == 3]
    assert run.iteration["count"] == 39 - len(planted)
    assert run.iteration["cv"] < 0.05
    [other] = run.other_kinds
    assert other["steps"] == planted
    assert other["every"] == 4
    assert other["calls"] == {"all_reduce": {"calls": 13, "bytes": 3 * EVAL.bucket_bytes + 40960}}
    assert other["training_calls_per_step"] == 3
    assert other["time_mean_ns"] > 1.5 * other["training_time_mean_ns"]
    assert 0.1 < other["share_of_run"] < 0.5


def test_the_note_names_the_steps_and_their_calls(eval_run: Path) -> None:
    analysis = analyze([eval_run])
    out = io.StringIO()
    print_analysis(analysis, Console(file=out, width=200))
    text = out.getvalue()
    assert "10 iterations of another kind, every 4 steps (3, 7, 11, 15, 19, 23, …)" in text
    assert "13 calls (all_reduce ×13) instead of 3" in text
    # diagnose --json prints Analysis.to_json()
    data = json.loads(json.dumps(analysis.to_json(), default=str))
    [other] = data["metrics"]["runs"][0]["other_iteration_kinds"]
    assert (other["every"], other["count"], other["calls_per_step"]) == (4, 10, 13)
    assert "sync_amplification" not in {f["mode"] for f in data["findings"]}


def test_a_healthy_run_of_one_kind_is_unchanged(tmp_path: Path) -> None:
    run = analyze([generate(SCENARIOS["healthy"], tmp_path)]).runs[0]
    assert run.other_kinds == []
    assert run.iteration["count"] == SCENARIOS["healthy"].steps - 1


def test_a_missing_or_coalesced_call_is_the_same_kind() -> None:
    train = {"all_reduce": (4, 400)}
    signatures = {s: dict(train) for s in range(10)}
    signatures[3] = {"all_reduce": (3, 300)}  # one call missing
    signatures[6] = {"all_reduce": (3, 400)}  # two calls coalesced
    assert kinds.classify(signatures) == [list(range(10))]


def test_sizes_the_data_sets_do_not_make_kinds() -> None:
    # an MoE layer's all-to-all moves what the router sends: 3x apart from step to step
    signatures = {
        s: {"all_reduce": (4, 400), "all_to_all": (8, 1000 * (1 + 2 * (s % 2)))} for s in range(12)
    }
    assert kinds.classify(signatures) == [list(range(12))]


OPS = st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast", "send"])
MIX = st.dictionaries(
    OPS, st.tuples(st.integers(1, 12), st.integers(1, 1 << 26)), min_size=1, max_size=4
)


@settings(max_examples=200, deadline=None)
@given(
    train=MIX,
    extra=MIX,
    period=st.integers(3, 9),  # a minority: at most one step in three
    steps=st.integers(20, 80),
    offset=st.integers(0, 8),
)
def test_the_dominant_kind_is_the_training_one(
    train: dict[str, tuple[int, int]],
    extra: dict[str, tuple[int, int]],
    period: int,
    steps: int,
    offset: int,
) -> None:
    # the other kind: the training calls plus an extra mix, every ``period`` steps
    other = dict(train)
    for op, (n, b) in extra.items():
        n0, b0 = other.get(op, (0, 0))
        other[op] = (n0 + n + 2 + n0, b0 + b + b0)  # more than a quarter more calls
    planted = [s for s in range(steps) if s % period == offset % period]
    signatures = {s: (other if s in planted else train) for s in range(steps)}
    groups = kinds.classify(signatures)
    assert groups[0] == [s for s in range(steps) if s not in planted]
    assert groups[1:] == [planted]


def test_streamed_and_in_memory_tell_the_kinds_apart_alike(eval_run: Path) -> None:
    whole = compute_metrics(load_trace(eval_run))
    streamed, _ = stream_metrics(eval_run, window_events=200)
    assert whole.other_kinds and whole.other_kinds == streamed.other_kinds
    assert same_metrics(whole, streamed) == []


def test_a_one_off_step_stays_with_the_training_iterations() -> None:
    signatures = {s: {"all_reduce": (4, 400)} for s in range(10)}
    signatures[1] = {"all_reduce": (4, 400), "broadcast": (2, 92)}  # first-step buffers
    assert kinds.split(signatures, pl.DataFrame({"step": list(range(10))}), {}) is None


def test_steps_without_calls_are_never_the_training_iterations() -> None:
    """A run with long idle gaps between its phases: more empty steps than iterations of
    any kind, which stay the training ones."""
    train = {"all_reduce": (5, 66_592)}
    signatures = {s: train for s in range(6)} | {6: {"all_reduce": (2, 16_672)}}
    steps = pl.DataFrame({"step": list(range(20))})  # 7..19 made no call
    found = kinds.split(signatures, steps, {})
    assert found is not None
    assert found.training == tuple(range(7)) and found.others == (tuple(range(7, 20)),)


def test_windows_of_time_are_not_told_apart_by_their_calls() -> None:
    """Steps an importer cut as fixed windows hold whatever calls their edges let in:
    no kind is told, however their mixes differ."""
    signatures = {s: {"all_reduce": (5 + 2 * (s % 3), 66_592 * (1 + s % 3))} for s in range(12)}
    steps = pl.DataFrame({"step": list(range(12))})
    assert kinds.split(signatures, steps, {}) is not None
    windows = {r: {"import": {"steps_from": "windows"}} for r in range(2)}
    assert kinds.split(signatures, steps, windows) is None
