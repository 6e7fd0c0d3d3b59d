"""``syncpace run -- torchrun … examples/ddp_train.py``: traced with no code change."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from multirank import free_port
from syncpace.trace import load_trace

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp_train.py"
LAYERS, HIDDEN, STEPS, WORLD = 4, 32, 5, 2
PARAM_BYTES = 4 * (LAYERS * (HIDDEN * HIDDEN + HIDDEN) + HIDDEN + 1)

pytestmark = pytest.mark.multirank


def syncpace(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "syncpace", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "run"
    proc = syncpace(
        "run",
        "--out",
        str(out),
        "--flush-interval-s",
        "0.2",
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(WORLD),
        "--master-port",
        str(free_port()),
        str(EXAMPLE),
        "--steps",
        str(STEPS),
        "--layers",
        str(LAYERS),
        "--hidden",
        str(HIDDEN),
        "--bucket-cap-mb",
        "0.001",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_run_prints_summary(ddp_run):
    out, proc = ddp_run
    assert f"trace in {out}" in proc.stderr
    assert f"{WORLD} ranks" in proc.stdout and "all_reduce" in proc.stdout


def test_steps_from_optimizer_hook(ddp_run):
    trace = load_trace(ddp_run[0])
    for rank in range(WORLD):
        steps = trace.steps.filter(pl.col("rank") == rank).sort("step")
        assert steps["step"].to_list() == list(range(STEPS))
        assert (steps["end_ns"] > steps["start_ns"]).all()
        assert (steps["start_ns"][1:] == steps["end_ns"][:-1]).all()


def test_ddp_bucket_all_reduces_cover_every_gradient(ddp_run):
    """After DDP's first iteration every step all-reduces each gradient exactly once,
    split across several buckets."""
    trace = load_trace(ddp_run[0])
    per_step = (
        trace.events.filter((pl.col("op") == "all_reduce") & (pl.col("step") >= 1))
        .group_by("rank", "step")
        .agg(pl.col("bytes").sum().alias("bytes"), pl.len().alias("buckets"))
    )
    assert per_step.height == WORLD * (STEPS - 1)
    assert per_step["bytes"].to_list() == [PARAM_BYTES] * per_step.height
    assert per_step["buckets"].min() >= 3


def test_trace_info_json(ddp_run):
    proc = syncpace("trace-info", str(ddp_run[0]), "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["world_size"] == WORLD and info["ranks_present"] == [0, 1]
    assert info["steps"] == STEPS
    assert info["missing_ranks"] == [] and info["unfinished_ranks"] == []
    assert info["events"] == sum(info["events_per_rank"].values())
    assert info["events_per_op"]["all_reduce"]["count"] >= WORLD * (STEPS - 1) * 3
    assert 0 < info["clock"]["max_uncertainty_ms"] < 1  # the JSON's durations are in ms


def test_refuses_to_overwrite_a_trace(ddp_run):
    proc = syncpace("run", "--out", str(ddp_run[0]), "--", sys.executable, "-c", "pass")
    assert proc.returncode == 2
    assert "already holds a trace" in proc.stderr and "Traceback" not in proc.stderr
    assert load_trace(ddp_run[0]).world_size == WORLD  # untouched


def test_untraced_command_is_reported(tmp_path):
    proc = syncpace("run", "--out", str(tmp_path / "r"), "--", sys.executable, "-c", "print('hi')")
    assert proc.returncode == 0
    assert "hi" in proc.stdout
    assert "no rank wrote a trace" in proc.stderr


def test_exit_code_of_the_command_is_kept(tmp_path):
    proc = syncpace(
        "run", "--out", str(tmp_path / "r"), "--", sys.executable, "-c", "raise SystemExit(3)"
    )
    assert proc.returncode == 3


def test_bad_flag_value_is_one_line(tmp_path):
    proc = syncpace("run", "--flush-interval-s", "soon", "--out", str(tmp_path / "r"), "--", "true")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "syncpace run: error: --flush-interval-s: expected float, got 'soon'"
    ]
