"""The live pacing controller on real gloo ranks."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from rich.console import Console

from multirank import join, run_ranks, start_ranks
from syncpace.analysis.api import analyze
from syncpace.control.ab import sign_test_confidence
from syncpace.report.html import render_html
from syncpace.report.terminal import print_analysis
from syncpace.trace import load_trace
from syncpace.trace.summary import summarize

WORKER = Path(__file__).parent / "workers" / "paced_job.py"
WORLD = 3

pytestmark = pytest.mark.multirank


def paced_env(out: Path, **settings: str) -> dict[str, str]:
    env = {"TRACE_DIR": str(out), "SYNCPACE_STRATEGY": "early", "SYNCPACE_HOLD": "3"}
    env.update({f"SYNCPACE_{k.upper()}": v for k, v in settings.items()})
    return env


def sync_point_skew_ms(trace) -> pl.DataFrame:
    """Per step: spread of the ranks' first collective (the sync point) enters."""
    first = trace.events.group_by("rank", "step").agg(pl.col("enter_ns").min())
    return (
        first.group_by("step")
        .agg(((pl.col("enter_ns").max() - pl.col("enter_ns").min()) / 1e6).alias("skew_ms"))
        .sort("step")
    )


def test_early_rank_is_paced_and_the_skew_drops(tmp_path):
    run_ranks(WORKER, WORLD, ["30", "5", "45"], env=paced_env(tmp_path, ab="0"))
    trace = load_trace(tmp_path)
    pacing = trace.meta[0]["pacing"]
    assert pacing["policy"] == "early" and pacing["enabled"] is True
    delays = trace.steps.filter(pl.col("rank") == 0).sort("step")["pacing_delay_ns"].to_numpy()
    assert delays[:3].sum() == 0  # nothing before the policy has seen `hold` steps
    assert (delays[8:] > 0).all()  # rank 0, the early one, is held back
    assert trace.steps.filter(pl.col("rank") != 0)["pacing_delay_ns"].sum() == 0
    assert 0 < pacing["delay_max_s"] <= pacing["bound_at_max_delay_s"] + 1e-9
    assert pacing["delay_max_s"] <= pacing["policy_config"]["max_delay_s"]
    skew = sync_point_skew_ms(trace)["skew_ms"].to_numpy()
    before, after = np.median(skew[1:4]), np.median(skew[10:])
    assert after < before - 3.0, (before, after)
    # The pacer never changes the job's collectives: one all-reduce per step per rank.
    assert trace.events.height == WORLD * 30


def test_stable_job_is_never_paced(tmp_path):
    # A high on-threshold: a shared test machine's own jitter must not count as skew.
    env = paced_env(tmp_path, ab="0", on_skew="0.3", off_skew="0.15")
    run_ranks(WORKER, WORLD, ["25", "20", "20"], env=env)
    trace = load_trace(tmp_path)
    assert trace.steps["pacing_delay_ns"].sum() == 0
    for meta in trace.meta.values():
        assert meta["pacing"]["paced_steps"] == 0 and meta["pacing"]["enabled"] is True


def test_broken_channel_fails_open_with_identical_collectives(tmp_path):
    env = paced_env(tmp_path, ab="0", pace_break="1:10", channel_timeout_s="2")
    run_ranks(WORKER, WORLD, ["30", "5", "45"], env=env)
    trace = load_trace(tmp_path)
    for rank, meta in trace.meta.items():
        assert meta["pacing"]["enabled"] is False, rank
        assert meta["pacing"]["error"]
    counts = trace.events.group_by("rank").len().sort("rank")["len"].to_list()
    assert counts == [30] * WORLD
    late = trace.steps.filter(pl.col("step") >= 14)["pacing_delay_ns"]
    assert late.sum() == 0  # off for the rest of the run


def test_killed_rank_does_not_hang_the_others(tmp_path):
    env = paced_env(tmp_path, ab="0", channel_timeout_s="2")
    env["PG_TIMEOUT"] = "6"
    start = time.monotonic()
    results = join(start_ranks(WORKER, WORLD, ["40", "5", "30", "2", "10"], env=env), timeout=60)
    elapsed = time.monotonic() - start
    assert results[2].returncode == -9
    survivors = [r for r in results if r.rank != 2]
    assert all(r.returncode != 0 for r in survivors)  # their all-reduce failed; no hang
    assert elapsed < 30, elapsed


def test_ab_guard_reaches_a_verdict_and_reports_it(tmp_path):
    env = paced_env(tmp_path, ab_window="5", ab_min_pairs="2", ab_max_pairs="3", ab_settle="1")
    run_ranks(WORKER, WORLD, ["36", "5", "30"], timeout=90, env=env)
    trace = load_trace(tmp_path)
    verdicts = {m["pacing"]["ab_state"] for m in trace.meta.values()}
    assert len(verdicts) == 1  # every rank reached the same verdict
    state = verdicts.pop()
    # 3 window pairs at most: the sign test can reach 0.875, never the 0.9 required, so
    # the guard must end in "no_help" (the early rank makes the policy pace at all)
    assert state == "no_help"
    ab = trace.meta[0]["pacing"]["ab"]
    window, settle, pairs = 5, 1, 3
    assert ab["on_steps"] == ab["off_steps"] == pairs * (window - settle)
    assert ab["confidence"] in [pytest.approx(sign_test_confidence(k, pairs)) for k in range(4)]
    info = summarize(trace).to_json()["pacing"]
    assert info["policy"] == "early" and info["ab_state"] == state
    assert 0 < info["fraction_paced"] < 1 and info["delay_max_s"] <= info["bound_s"]
    assert info["ab_confidence"] == ab["confidence"]
    assert info["ab_required"] == 0.9  # the default the verdict was held to
    # diagnose and report show the pacer's account
    analysis = analyze([trace])
    assert analysis.runs[0].pacing["ab_state"] == state
    console = Console(record=True, width=200)
    print_analysis(analysis, console)
    text = console.export_text()
    assert "pacing (early):" in text and "A/B" in text
    # the verdict with the figures it rests on: a gain it did not trust is said to be
    # untrusted, with how sure it was against the 90 % needed; no gain, no figure needed
    if info["ab_throughput_gain"] > 0:
        assert f"{ab['confidence']:.0%} sure it is not chance, 90% needed" in text
    else:
        assert "A/B turned off: pacing did not help" in text
    assert "pacing (early):" in render_html(analysis)
    # pacing off after the verdict (at step 29, in force from 31), on every rank
    assert trace.steps.filter(pl.col("step") >= 32)["pacing_delay_ns"].sum() == 0
