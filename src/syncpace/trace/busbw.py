"""nccl-tests' bus bandwidth of the trace's ops: ``busbw = algbw × factor(op, n)``.

The factor is the share of the data each rank's link carries in the ideal algorithm
over ``n`` ranks, so a bus bandwidth compares across ops and with the link rate (see
nccl-tests' PERFORMANCE.md). It assumes a flat topology (every link as fast as every
other). The one table the analysis, the benchmark and the simulator all read.
"""

from __future__ import annotations

#: op -> (a, b): factor(n) = a·(n − 1)/n + b.
FACTORS: dict[str, tuple[int, int]] = {
    "all_reduce": (2, 0),
    "all_gather": (1, 0),
    "reduce_scatter": (1, 0),
    "all_to_all": (1, 0),
    "gather": (1, 0),
    "scatter": (1, 0),
    "broadcast": (0, 1),
    "reduce": (0, 1),
    "send": (0, 1),
    "recv": (0, 1),
    "sendrecv": (0, 1),  # the benchmark's paired send and receive
}


def bus_factor(op: str, n: int) -> float | None:
    """The factor of ``op`` over ``n`` ranks; ``None`` for an op that moves no data
    (barrier) or that nccl-tests does not count."""
    if op not in FACTORS:
        return None
    a, b = FACTORS[op]
    return a * (n - 1) / n + b
