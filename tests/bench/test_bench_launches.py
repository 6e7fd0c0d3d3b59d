"""How the benchmark is launched (self-launched, under torchrun as a module, under
``syncpace run``) and what it counts wrong (a planted corruption), on real gloo ranks.
Every assertion here is a count, an op or a file, never a time: the ranks may run
beside other work (``untimed``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from benchrun import TIMEOUT, bench

from multirank import free_port
from syncpace.bench.results import load_bench
from syncpace.trace import load_trace

pytestmark = [pytest.mark.multirank, pytest.mark.untimed]


def test_a_planted_corruption_is_counted_and_fails_the_run(tmp_path):
    out = tmp_path / "run"
    proc = bench(
        "--nproc",
        "3",
        "all_reduce",
        "reduce",
        "broadcast",
        "-b",
        "64",
        "-e",
        "256",
        "-f",
        "4",
        "-n",
        "2",
        "-w",
        "1",
        "--no-pairs",
        "--out",
        str(out),
        "--timeout-s",
        "60",
        env={"SYNCPACE_BENCH_CORRUPT": "1"},
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    data = load_bench(out)
    wrong = {(r["op"], r["size_bytes"]): r["wrong"] for r in data["rows"]}
    # rank 1's input reaches every rank's all-reduce result and the root's reduce;
    # a non-root broadcast buffer is overwritten, as it must be
    assert wrong == {
        ("all_reduce", 64): 3,
        ("all_reduce", 256): 3,
        ("reduce", 64): 1,
        ("reduce", 256): 1,
        ("broadcast", 64): 0,
        ("broadcast", 256): 0,
    }
    assert data["wrong"] == 8
    assert "# Out of bounds values : 6 FAILED" in proc.stdout
    assert "8 wrong elements" in proc.stdout


def test_torchrun_runs_it_as_a_module_in_place_with_half_precision(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "-m",
            "syncpace",
            "bench",
            "all_gather",
            "reduce_scatter",
            "all_reduce",
            "--inplace",
            "-d",
            "half",
            "-b",
            "64",
            "-e",
            "1K",
            "-f",
            "4",
            "-n",
            "2",
            "-w",
            "1",
            "--no-pairs",
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout)
    assert printed == load_bench(out)
    assert printed["inplace"] is True and printed["dtype"] == "half"
    assert [r["op"] for r in printed["rows"]] == ["all_gather"] * 3 + ["reduce_scatter"] * 3 + [
        "all_reduce"
    ] * 3
    assert all(r["wrong"] == 0 for r in printed["rows"])
    assert printed["rows"][0]["dtype"] == "half" and printed["rows"][0]["count"] == 16


def test_under_syncpace_run_the_bench_lands_in_the_armed_directory(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "syncpace",
            "run",
            "--out",
            str(out),
            "--quiet",
            "--",
            sys.executable,
            "-m",
            "syncpace",
            "bench",
            "--nproc",
            "2",
            "sendrecv",
            "-b",
            "1K",
            "-e",
            "1K",
            "-n",
            "2",
            "-w",
            "1",
            "--no-pairs",
            "--out",
            str(tmp_path / "ignored"),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "ignored").exists()
    assert [r["op"] for r in load_bench(out)["rows"]] == ["sendrecv"]
    trace = load_trace(out)
    assert set(trace.events["op"].unique()) == {"send", "recv"}
