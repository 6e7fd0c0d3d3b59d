"""Pure parts of the benchmark: sizes, settings, the op table, rounds, flags, the fit."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.bench.config import BenchConfig, parse_size
from syncpace.bench.fit import fit_alpha_beta, fit_rows
from syncpace.bench.ops import OPS, layout, reduced_table, resolve_ops
from syncpace.bench.pairs import flag_slow, round_robin
from syncpace.bench.results import BenchResult, IterStats, SizeRow
from syncpace.bench.table import footer, header, row
from syncpace.errors import BenchError, SyncpaceError
from syncpace.trace.busbw import bus_factor


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8),
        ("1K", 1024),
        ("128M", 128 << 20),
        ("1G", 1 << 30),
        ("64k", 65536),
        ("2MiB", 2 << 20),
        ("4KB", 4096),
        (3, 3),
    ],
)
def test_sizes_read_like_nccl_tests(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "1.5M", "12Q", "-8", "0", "M"])
def test_bad_sizes_are_one_line_errors(text):
    with pytest.raises(BenchError) as err:
        parse_size(text, "max_bytes")
    assert "max_bytes" in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, SyncpaceError)


def test_sweep_multiplies_by_the_factor():
    config = BenchConfig(min_bytes="8", max_bytes="1K", step_factor=4)
    assert config.sizes() == [8, 32, 128, 512]


@pytest.mark.parametrize(
    "bad",
    [
        {"min_bytes": "1M", "max_bytes": "1K"},
        {"step_factor": 1},
        {"iters": 0},
        {"dtype": "complex"},
        {"redop": "avg"},
        {"ops": "all_reduce,gather"},
        {"nproc": 1},
        {"slow_fraction": 1.5},
        {"backend": "mpi"},
        {"gap_ms": -1.0},
    ],
)
def test_bad_settings_raise(bad):
    with pytest.raises(BenchError):
        BenchConfig(**bad)


def test_ops_resolve_in_table_order_without_duplicates():
    assert resolve_ops("all") == tuple(OPS)
    assert resolve_ops("sendrecv,all_reduce sendrecv") == ("sendrecv", "all_reduce")


@pytest.mark.parametrize("n", [2, 3, 4, 8, 64])
def test_busbw_factors_are_those_of_nccl_tests(n):
    expected = {
        "all_reduce": 2 * (n - 1) / n,
        "all_gather": (n - 1) / n,
        "reduce_scatter": (n - 1) / n,
        "all_to_all": (n - 1) / n,
        "broadcast": 1.0,
        "reduce": 1.0,
        "sendrecv": 1.0,
    }
    assert {op: bus_factor(op, n) for op in OPS} == expected


def test_sizes_and_counts_are_counted_as_nccl_tests_counts_them():
    # all_reduce: the buffer; count = its elements
    assert layout("all_reduce", 1024, 4, 4) == layout("broadcast", 1024, 4, 4)
    assert layout("all_reduce", 1024, 4, 4).count == 256
    # all_gather: size = the gathered output, count = one rank's part
    ag = layout("all_gather", 1000, 4, 4)
    assert (ag.size_bytes, ag.count, ag.in_numel, ag.out_numel) == (992, 62, 62, 248)
    rs = layout("reduce_scatter", 1024, 4, 4)
    assert (rs.size_bytes, rs.count, rs.in_numel, rs.out_numel) == (1024, 64, 256, 64)
    a2a = layout("all_to_all", 1024, 4, 4)
    assert (a2a.size_bytes, a2a.count, a2a.in_numel, a2a.out_numel) == (1024, 64, 256, 256)
    assert layout("all_gather", 8, 4, 4) is None  # less than one element per rank


def test_reduced_table_is_the_reduction_of_the_pattern():
    assert reduced_table(4, "sum") == [3, 4, 5]  # (0+1+2+0), (1+2+0+1), (2+0+1+2)
    assert reduced_table(4, "min") == [0, 0, 0]
    assert reduced_table(2, "max") == [1, 2, 2]


@given(st.integers(min_value=2, max_value=40))
@settings(max_examples=39, deadline=None)
def test_rounds_cover_every_pair_once_with_disjoint_pairs(n):
    rounds = round_robin(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = [p for r in rounds for p in r]
    assert sorted(seen) == [(a, b) for a in range(n) for b in range(a + 1, n)]
    for r in rounds:
        ranks = [x for p in r for x in p]
        assert len(ranks) == len(set(ranks))  # each rank in at most one pair per round


def _matrix(n, value, slow_rank=None, slow_value=None):
    return [
        [None if i == j else (slow_value if slow_rank in (i, j) else value) for j in range(n)]
        for i in range(n)
    ]


def test_slow_pairs_and_the_rank_they_share_are_flagged():
    median, ref, slow, suspects = flag_slow(_matrix(6, 10.0, slow_rank=4, slow_value=2.0), 0.7)
    assert median == 10.0 and ref == 10.0
    assert {(p.src, p.dst) for p in slow} == {(4, j) for j in range(6) if j != 4} | {
        (j, 4) for j in range(6) if j != 4
    }
    assert all(p.ratio == pytest.approx(0.2) for p in slow)
    assert suspects == (4,)
    assert flag_slow(_matrix(4, 3.0), 0.7)[2:] == ((), ())


def test_a_slow_uplink_flags_pairs_but_no_single_rank():
    bw = _matrix(4, 10.0)
    for i, j in [(0, 2), (0, 3), (1, 2), (1, 3)]:
        bw[i][j] = bw[j][i] = 3.0
    median, _, slow, suspects = flag_slow(bw, 0.7)
    assert median == 3.0  # most pairs cross the uplink: the median alone would hide them
    assert len(slow) == 8 and suspects == ()


@pytest.mark.parametrize(
    ("alpha_us", "beta_gbps", "factor", "noise"),
    [
        (25.0, 1.2, 1.5, 0.03),
        (150.0, 0.0125, 1.0, 0.05),
        (4.0, 20.0, 0.75, 0.02),
        (800.0, 0.1, 1.875, 0.04),
    ],
)
def test_fit_recovers_known_alpha_beta_within_5_percent(alpha_us, beta_gbps, factor, noise):
    rng = np.random.default_rng(7)
    sizes = np.array([8 * 2**k for k in range(24)], dtype=float)  # 8 B .. 64 MiB
    clean = alpha_us + factor * sizes / (beta_gbps * 1e3)
    times = clean * (1 + noise * rng.standard_normal(len(sizes)))
    times[5] *= 3  # one disturbed point must not drag the fit
    fit = fit_alpha_beta("op", sizes, times, factor)
    assert fit.alpha_us == pytest.approx(alpha_us, rel=0.05)
    assert fit.beta_gbps == pytest.approx(beta_gbps, rel=0.05)
    assert fit.knee_bytes == pytest.approx(alpha_us * beta_gbps * 1e3 / factor, rel=0.08)
    assert fit.predict_us(1 << 20) == pytest.approx(
        alpha_us + factor * (1 << 20) / (beta_gbps * 1e3), rel=0.05
    )


def test_fit_of_pure_latency_and_of_too_few_points():
    fit = fit_alpha_beta("op", [8, 16, 32, 64], [50.0, 50.0, 50.0, 50.0], 1.0)
    assert fit.alpha_us == pytest.approx(50.0) and math.isinf(fit.beta_gbps)
    assert fit.to_json()["beta_gbps"] is None
    assert fit_alpha_beta("op", [8, 8], [1.0, 2.0], 1.0) is None


def _row(op, size, time_us, n=4, wrong=0):
    stats = IterStats.of([time_us] * 3)
    algbw = size / time_us / 1e3
    return SizeRow(
        op=op,
        size_bytes=size,
        count=size // 4,
        dtype="float",
        redop="sum",
        root=-1,
        time_us=time_us,
        algbw_gbps=algbw,
        busbw_gbps=algbw * bus_factor(op, n),
        wrong=wrong,
        stats=stats,
        rank_time_us=(time_us,) * n,
        step=0,
    )


def test_iteration_stats():
    s = IterStats.of([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (s.min_us, s.p50_us, s.mean_us) == (1.0, 3.0, 22.0)
    assert s.p99_us == pytest.approx(np.percentile([1, 2, 3, 4, 100], 99))
    assert s.cv == pytest.approx(np.std([1, 2, 3, 4, 100]) / 22.0)


def test_table_lines_and_footer():
    rows = [_row("all_reduce", 1 << 20, 1000.0), _row("all_reduce", 2 << 20, 1800.0, wrong=2)]
    line = row(rows[0])
    assert line.split()[:5] == ["1048576", "262144", "float", "sum", "-1"]
    assert "1.0486" in line and "1.5729" in line  # algbw, busbw = algbw * 2*3/4
    assert "#wrong" in header("all_reduce", 4, "gloo", "cpu", False, 5, 1)[2]
    assert footer(rows)[0] == "# Out of bounds values : 2 FAILED"
    avg = (rows[0].busbw_gbps + rows[1].busbw_gbps) / 2
    assert footer(rows)[1] == f"# Avg bus bandwidth    : {avg:.6g}"


def test_result_json_and_fits_per_op():
    rows = tuple(_row("all_gather", s, 10 + s / 1e3) for s in (1024, 4096, 16384, 65536))
    result = BenchResult(
        world_size=4,
        backend="gloo",
        device="cpu",
        dtype="float",
        inplace=False,
        iters=3,
        warmup=1,
        hosts=("a",) * 4,
        rows=rows,
        fits=fit_rows(rows, 4),
    )
    data = result.to_json()
    assert data["schema"] == "syncpace.bench" and data["wrong"] == 0
    assert data["fits"]["all_gather"]["alpha_us"] == pytest.approx(10.0, rel=1e-6)
    assert data["fits"]["all_gather"]["beta_gbps"] == pytest.approx(0.75, rel=1e-6)


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "syncpace", "bench", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_cli_bad_size_is_one_line_and_exit_2():
    proc = _cli("-e", "12Q", "--nproc", "2")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "max_bytes" in proc.stderr and "12Q" in proc.stderr


@pytest.mark.slow
def test_cli_outside_a_job_says_how_to_launch(monkeypatch):
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = _cli("all_reduce", env=env)
    assert proc.returncode == 2 and "--nproc N" in proc.stderr
    proc = _cli("gather", "--nproc", "2", env=env)
    assert proc.returncode == 2 and "unknown op 'gather'" in proc.stderr
