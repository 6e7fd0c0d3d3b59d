"""The collective benchmark: nccl-tests-style sweeps, the pair matrix, the α–β fit.

Run it with ``syncpace bench`` (docs/bench.md); read its results with
:func:`load_bench` / :func:`load_pair_matrix`; draw them with
:mod:`syncpace.bench.figures` (needs plotly).
"""

from __future__ import annotations

from syncpace.bench.config import BenchConfig, parse_size
from syncpace.bench.fit import fit_alpha_beta
from syncpace.bench.pairs import flag_slow, round_robin
from syncpace.bench.results import (
    AlphaBetaFit,
    BenchResult,
    PairMatrix,
    SizeRow,
    SlowPair,
    load_bench,
    load_pair_matrix,
)
from syncpace.errors import BenchError

__all__ = [
    "AlphaBetaFit",
    "BenchConfig",
    "BenchError",
    "BenchResult",
    "PairMatrix",
    "SizeRow",
    "SlowPair",
    "fit_alpha_beta",
    "flag_slow",
    "load_bench",
    "load_pair_matrix",
    "parse_size",
    "round_robin",
]
