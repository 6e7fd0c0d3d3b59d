"""What to do, in the terms of the parallelism the job uses.

The same symptom asks for different fixes: communication left exposed is fixed by
bucketing in DDP, by prefetching in FSDP, by more microbatches in a pipeline, and is
by design for a DDP model whose gradients fit one bucket. Each function returns the
actions for one failure mode, the ones for the parallelism seen first, then the
generic ones that still apply.
"""

from __future__ import annotations

from syncpace.analysis.parallelism import Parallelism

_FSDP_OVERLAP = (
    "FSDP: let the next all-gather start before it is needed: explicit prefetching "
    "(module.set_modules_to_forward_prefetch / set_modules_to_backward_prefetch in "
    "FSDP2, forward_prefetch / BackwardPrefetch.BACKWARD_PRE in FSDP1).",
    "FSDP: keep the last blocks' parameters gathered (reshard_after_forward=False for "
    "them) so backward does not wait for their all-gathers again.",
)
_PP_OVERLAP = (
    "Pipeline: more microbatches per step (n_microbatches of at least 2-4 x the "
    "stages) shrink the bubble; an interleaved or 1F1B schedule (ScheduleInterleaved1F1B, "
    "Schedule1F1B) overlaps sends with the other microbatches' compute.",
)
_TP_OVERLAP = (
    "Tensor parallel: its all-reduces sit inside every layer by design; keep the "
    "tensor-parallel dimension inside a node (the fastest links) and overlap with "
    "sequence parallel / async tensor parallel where the model allows.",
)
_EXPERT_OVERLAP = (
    "All-to-all (expert parallel): balance the tokens each expert receives (capacity "
    "factor, load-balancing loss) so no rank's dispatch is the long pole, and overlap "
    "dispatch with the shared layers' compute.",
)
_DDP_BUCKETS = (
    "Let gradients be reduced during backward: DDP with default bucketing, no manual "
    "all-reduce after loss.backward().",
    "Avoid no_sync()/gradient accumulation patterns that push all communication to the "
    "last micro-batch, or make buckets smaller so the first start earlier.",
)


def _ddp_one_bucket(p: Parallelism) -> tuple[str, ...]:
    return (
        f"DDP runs {p.ddp_buckets:g} gradient bucket per iteration: the gradients fit one "
        "bucket (bucket_cap_mb, 25 MB by default), so its all-reduce can only start when "
        "backward ends. That is by design for a model this small; a smaller bucket_cap_mb "
        "splits it so part overlaps backward, at the price of more, smaller calls.",
    )


def poor_overlap(p: Parallelism) -> tuple[str, ...]:
    actions: list[str] = []
    if p.has("fsdp"):
        actions += _FSDP_OVERLAP
    if p.has("pipeline"):
        actions += _PP_OVERLAP
    if p.has("tensor"):
        actions += _TP_OVERLAP
    if p.has("expert"):
        actions += _EXPERT_OVERLAP
    if p.has("ddp"):
        actions += _ddp_one_bucket(p) if p.ddp_one_bucket else _DDP_BUCKETS
    return tuple(actions) or _DDP_BUCKETS + (
        "Issue collectives with async_op=True and wait on them only when their result "
        "is needed, so compute runs meanwhile.",
    )


def latency_bound(p: Parallelism) -> tuple[str, ...]:
    actions: list[str] = []
    if p.has("fsdp"):
        actions.append(
            "FSDP: shard fewer, larger units (fully_shard on transformer blocks, not on "
            "every layer): each unit costs an all-gather and a reduce-scatter per step."
        )
    if p.has("ddp"):
        actions.append(
            "DDP: fewer, larger buckets (raise bucket_cap_mb) and no per-parameter hooks "
            "that all-reduce one tensor at a time."
        )
    if p.has("tensor"):
        actions.append(
            "Tensor parallel: every sharded layer pays a collective's latency; shard only "
            "the layers large enough to pay it back, keep the dimension inside a node."
        )
    if p.has("pipeline"):
        actions.append(
            "Pipeline: fewer, larger microbatches cut the sends per step; batch a "
            "stage's sends and receives (batch_isend_irecv)."
        )
    actions += [
        "Coalesce small calls (torch.distributed._coalescing_manager, "
        "all_reduce_coalesced) or flatten small tensors into one buffer.",
        "Move per-step scalar syncs (metrics, loss logging) off the critical path or do "
        "them every N steps.",
    ]
    return tuple(actions)


def bandwidth_bound(p: Parallelism) -> tuple[str, ...]:
    actions: list[str] = []
    if p.has("fsdp"):
        actions.append(
            "FSDP: hybrid sharding (HSDP: shard inside a node, replicate across) cuts "
            "cross-node all-gather volume; bf16 parameters and reduce_dtype halve it."
        )
    if p.has("ddp"):
        actions.append(
            "DDP: send fewer bytes with a compression comm hook (bf16_compress_hook, "
            "PowerSGD), or shard (FSDP/ZeRO) to cut the all-reduce volume."
        )
    if p.has("tensor"):
        actions.append(
            "Tensor parallel moves activations every layer: keep it inside a node and "
            "scale across nodes with data or pipeline parallelism instead."
        )
    actions += [
        "Hierarchical collectives (reduce inside nodes first) keep most bytes off the "
        "slowest links.",
        "Faster or more NICs per node if the link is the limit.",
    ]
    return tuple(actions)


def comm_dominated(p: Parallelism) -> tuple[str, ...]:
    lead = (
        f"This job is {p.describe()}: raise compute per step (a larger per-rank batch or "
        "more microbatches) so communication amortises."
        if p.kinds
        else "Raise compute per step (a larger per-rank batch) so communication amortises."
    )
    return (
        lead,
        "Cut communication volume (bf16 communication, compression, sharding).",
        "See the bandwidth/latency findings for which side to attack.",
    )


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))}"


def late_cpu(ranks: list[int]) -> tuple[str, ...]:
    """A straggler whose device waits for its CPU (device time shows it)."""
    return (
        f"The CPU of {_ranks(ranks)} is late and its GPU waits for it: profile the host "
        "side of its step (py-spy, torch.profiler's CPU view): data loading (more "
        "DataLoader workers, pin_memory, prefetch_factor), Python work per step, syncs "
        "such as .item() or .cpu() that stop the CPU from running ahead.",
        "If the step launches many small kernels, it is launch-bound: CUDA graphs "
        "(torch.compile mode='reduce-overhead') or fused kernels cut the CPU's share.",
    )


def slow_gpu(ranks: list[int]) -> tuple[str, ...]:
    """A straggler whose CPU is on time but whose device arrives late."""
    return (
        f"The GPU of {_ranks(ranks)} is slow while its CPU is on time: check its clocks, "
        "power and thermal throttling (nvidia-smi -q -d PERFORMANCE,CLOCK,POWER), ECC "
        "errors and retired pages, other processes on that GPU, its PCIe link width.",
        "Compare its kernels' durations with a peer's in a profiler: a uniformly slower "
        "GPU is hardware; slower kernels on that rank alone may be uneven work.",
    )
