"""The training step being simulated: DDP-like gradient buckets over backward compute.

Per iteration a rank runs ``accumulation`` micro-steps of forward + backward; only the
last backward all-reduces (the others run under ``no_sync``). Gradients are produced
uniformly over that backward; they fill buckets of ``bucket_mb`` in order, and a bucket
is issued when its last gradient is ready (at its cumulative byte fraction of backward),
or all at the end of backward when ``overlap`` is off. Buckets of one rank run in order
on one communication stream. The optimizer step follows once backward and every bucket
are done. Bytes on the wire are the fp32 gradient bytes scaled by the communication
dtype (``bfloat16`` halves them) and divided by ``compression``.
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
        )
        if self.bucket_mb * 100_000 < self.model_mb:
            raise ConfigError(
                f"model_mb / bucket_mb must be at most 100000 buckets, got "
                f"{self.model_mb} / {self.bucket_mb}"
            )
        check_choice(self, "comm_dtype", tuple(DTYPES))
        check_choice(self, "op", GRADIENT_OPS)

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

    @property
    def compute_s(self) -> float:
        return self.accumulation * (self.fwd_ms + self.bwd_ms) * 1e-3

    @property
    def samples_per_rank(self) -> int:
        return self.accumulation * self.batch_per_gpu
