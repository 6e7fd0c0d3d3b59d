"""The training step being simulated: DDP-like gradient buckets over backward compute.

Per iteration a rank runs ``accumulation`` micro-steps of forward + backward; only the
last backward all-reduces (the others run under ``no_sync``). Gradients are produced
uniformly over that backward; they fill buckets of ``bucket_mb`` in order, and a bucket
is issued when its last gradient is ready (at its cumulative byte fraction of backward),
or all at the end of backward when ``overlap`` is off. Buckets of one rank run in order
on one communication stream. The optimizer step follows once backward and every bucket
are done. Bytes on the wire are the fp32 gradient bytes scaled by the communication
dtype (``bfloat16`` halves them) and divided by ``compression``.

The host (CPU) that issues the work is part of the workload: it takes ``host_ms`` to
issue one iteration (``host_ranks`` take their own ``host_rank_ms``), may run up to
``run_ahead_steps`` iterations ahead of its device, and the pacer's delay is placed on
the device's stream or slept on the host (``pacing_on``). :mod:`syncpace.sim.host` has
the equations; with every host time 0 and the delay on the device the host never limits
and the simulation is the one without a host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from syncpace.config import check_choice, check_numbers, setting
from syncpace.errors import ConfigError

MIB = 1 << 20
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: The collectives a gradient bucket can be reduced with.
GRADIENT_OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
#: Where the pacer's delay goes: a kernel on the device's stream, or a sleep of the host.
PLACEMENTS = ("device", "host")


@dataclass(kw_only=True, slots=True)
class WorkloadSpec:
    fwd_ms: float = setting(60.0, "Forward time of one micro-step, ms.")
    bwd_ms: float = setting(120.0, "Backward time of one micro-step, ms.")
    opt_ms: float = setting(5.0, "Optimizer step, ms.")
    model_mb: float = setting(100.0, "Gradient size in fp32, MiB.")
    bucket_mb: float = setting(25.0, "DDP bucket cap (fp32 MiB).")
    accumulation: int = setting(1, "Gradient-accumulation micro-steps per iteration.")
    overlap: bool = setting(True, "Issue buckets during backward (False: all after it).")
    comm_dtype: str = setting("float32", "Dtype on the wire: float32, bfloat16, float16.")
    compression: float = setting(1.0, "Gradient compression ratio (>= 1) on the wire.")
    batch_per_gpu: int = setting(32, "Samples per GPU and micro-step (for samples/s).")
    op: str = setting("all_reduce", "Collective of each bucket.")
    host_ms: float = setting(
        0.0, "Host (CPU) time to issue one iteration's work, ms; 0: the host never limits."
    )
    host_ranks: tuple[int, ...] = setting((), "Ranks whose host takes its own time (host_rank_ms).")
    host_rank_ms: tuple[float, ...] = setting(
        (), "Each of host_ranks' host time per iteration, ms, in host_ranks' order."
    )
    host_jitter: float = setting(0.0, "Per-iteration host-time jitter (lognormal sigma).")
    run_ahead_steps: int = setting(
        2, "Iterations the host may issue ahead of its device (0: it waits for every one)."
    )
    pacing_on: str = setting(
        "device", "Where the pacer's delay goes: device (a kernel on the stream) or host (a sleep)."
    )

    def __post_init__(self) -> None:
        check_numbers(
            self,
            fwd_ms="[0, 1e7]",
            bwd_ms="[0, 1e7]",
            opt_ms="[0, 1e7]",
            model_mb="(0, 1e7]",
            bucket_mb="(0, 1e7]",
            accumulation="[1, 100000]",
            compression="[1, 1e6]",
            batch_per_gpu="[1, 1e9]",
            host_ms="[0, 1e7]",
            host_ranks="[0, 100000000]",
            host_rank_ms="[0, 1e7]",
            host_jitter="[0, 10]",
            run_ahead_steps="[0, 1000]",
        )
        if self.bucket_mb * 100_000 < self.model_mb:
            raise ConfigError(
                f"model_mb / bucket_mb must be at most 100000 buckets, got "
                f"{self.model_mb} / {self.bucket_mb}"
            )
        check_choice(self, "comm_dtype", tuple(DTYPES))
        check_choice(self, "op", GRADIENT_OPS)
        check_choice(self, "pacing_on", PLACEMENTS)
        self.host_ranks = tuple(int(r) for r in self.host_ranks)
        self.host_rank_ms = tuple(float(t) for t in self.host_rank_ms)
        if len(self.host_rank_ms) != len(self.host_ranks):
            raise ConfigError(
                f"host_rank_ms needs one time per host rank ({len(self.host_ranks)}), "
                f"got {len(self.host_rank_ms)}"
            )

    def bucket_bytes(self) -> np.ndarray:
        """Wire bytes of each bucket, in issue order."""
        total = self.model_mb * MIB
        cap = self.bucket_mb * MIB
        count = int(np.ceil(total / cap - 1e-9))
        sizes = np.full(count, cap)
        sizes[-1] = total - cap * (count - 1)
        wire = sizes * DTYPES[self.comm_dtype] / 4 / self.compression
        return np.maximum(np.round(wire), 1).astype(np.int64)

    def ready_fraction(self) -> np.ndarray:
        """When each bucket is issued, as a fraction of the last backward."""
        sizes = self.bucket_bytes().astype(float)
        if not self.overlap:
            return np.ones(sizes.size)
        return np.cumsum(sizes) / sizes.sum()

    def host_positions(self) -> tuple[np.ndarray, float]:
        """Where in the host's issue of one iteration each bucket is issued, and where its
        backward ends, as fractions of that issue. The host issues kernels in program
        order, taken here in proportion to what they take on the device (nominal times,
        no noise); DDP waits on its buckets at the end of backward. With no device work
        at all every position is 1 (the end)."""
        total = self.compute_s + self.opt_ms * 1e-3
        if total <= 0:
            return np.ones(self.bucket_bytes().size), 1.0
        issued = self.compute_s - self.bwd_ms * 1e-3 * (1.0 - self.ready_fraction())
        return issued / total, self.compute_s / total

    @property
    def host_modelled(self) -> bool:
        """Whether the host can change anything: a host time above 0 or a delay slept on
        the host. Without either the host never limits (the simulation without one)."""
        timed = self.host_ms > 0 or any(t > 0 for t in self.host_rank_ms)
        return timed or self.pacing_on == "host"

    @property
    def compute_s(self) -> float:
        return self.accumulation * (self.fwd_ms + self.bwd_ms) * 1e-3

    @property
    def samples_per_rank(self) -> int:
        return self.accumulation * self.batch_per_gpu
