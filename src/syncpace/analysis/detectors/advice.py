"""What to do, in the terms of the parallelism the job uses.

Every failure mode's actions are worded here, by the function named after the mode
(:mod:`syncpace.analysis.modes`; a test holds every mode to it), from what its
detector found: the ranks, the nodes, the step, the parallelism.

The same symptom asks for different fixes: communication left exposed is fixed by
bucketing in DDP, by prefetching in FSDP, by more microbatches in a pipeline, and is
by design for a DDP model whose gradients fit one bucket. Where the parallelism
matters, the actions for the parallelism seen come first, then the generic ones that
still apply.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from syncpace.analysis.hang.points import HangPoint
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


def rebucket(buckets: int, cap_mb: float, total_mb: float, saving: float) -> str:
    """The re-bucketing the replay found best, as an action: how many buckets, DDP's
    ``bucket_cap_mb`` for them, and what it saves."""
    return (
        f"Reduce the gradients ({total_mb:.3g} MiB per step) in {buckets} buckets of "
        f"{cap_mb:.3g} MiB as backward produces them (DDP: bucket_cap_mb={cap_mb:.3g}; by "
        f"hand: an async_op all-reduce per bucket as its gradients are ready, waited on "
        f"before the optimizer step): replayed, each iteration {saving:.1%} shorter."
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


# Stopped jobs ------------------------------------------------------------------------


def rank_list(ranks: list[int] | tuple[int, ...]) -> str:
    """``[0, 1, 2, 5]`` -> ``"ranks 0-2, 5"``; one rank -> ``"rank 3"`` (the hang
    findings' summaries name ranks the same way)."""
    values = sorted(set(ranks))
    if not values:
        return "no rank"
    parts: list[str] = []
    start = prev = values[0]
    for v in values[1:] + [None]:  # type: ignore[list-item]
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ("rank " if len(values) == 1 else "ranks ") + ", ".join(parts)


def hang(point: HangPoint) -> tuple[str, ...]:
    """A job stopped at ``point``: find what the ranks the others wait for are doing."""
    return _stopped(point, "hang")


def desync(point: HangPoint | None) -> tuple[str, ...]:
    """Ranks disagree: at a hang point (``point``), or among completed calls (None)."""
    if point is None:
        return (
            "Make every rank issue the same collectives in the same order with the same "
            "sizes and dtypes: results after this call are not what the job computes.",
        )
    return _stopped(point, "desync")


def _stopped(point: HangPoint, mode: str) -> tuple[str, ...]:
    """What to do at a hang point: the lines that fit what the ranks there are doing."""
    out = []
    states = {r.state for r in point.missing}
    if mode == "desync" and point.mismatch is not None:
        m = point.mismatch
        out.append(
            f"Make every rank issue the same collectives in the same order with the same "
            f"{'sizes' if m.field == 'bytes' else m.field + 's'}: {rank_list(list(m.minority))}"
            " takes a different path at the stack shown (a rank-dependent branch, uneven data)."
        )
    if point.skip is not None and point.skip.counts:
        out.append(
            f"{rank_list(list(point.skip.ranks))} skipped or added a collective in step "
            f"{point.skip.step}: look for a condition that differs across ranks there."
        )
    if "stuck" in states or "progressing" in states:
        out.append(
            "Look at the stack of the rank the others wait for: whatever blocks it there "
            "(data loader, I/O, a barrier only some ranks reach) is the cause."
        )
    if "died" in states or "silent" in states:
        out.append(
            "Find why the rank stopped: its exit status and the kernel log on its node "
            "(OOM killer, segfault, a lost host); the other ranks only waited for it."
        )
    if "exited" in states:
        out.append("A rank finished early: it issued fewer collectives than the others.")
    if "absent" in states:
        out.append(
            "Some ranks left no trace here: pass every node's run directory "
            "(syncpace hang DIR1 DIR2 …)."
        )
    if not point.missing and mode == "hang":
        out.append(
            "Every rank entered the call: suspect the fabric or the library (NCCL_DEBUG=INFO, "
            "link errors) or a peer that died inside it."
        )
    out.append(
        "While a job hangs, `syncpace hang RUN_DIR` answers from the stall records in seconds; "
        "lower TORCH_NCCL timeouts only after the cause is known."
    )
    return tuple(out)


# Arrivals ----------------------------------------------------------------------------


def straggler(starved: Sequence[str], device_side: Sequence[str]) -> tuple[str, ...]:
    """Persistent stragglers (late in both halves of the run): the starved hosts' CPUs
    first, then what the device clock says of the late side (``device_side``, from
    ``detectors.device.actions``)."""
    return (
        *(
            (
                f"Give the job's ranks on {', '.join(starved)} the CPUs they need: raise "
                "its CPU limit (the container's or the scheduler's CPU request), or move "
                "what else runs there; a starved rank also starves the threads that "
                "drive its communication.",
            )
            if starved
            else ()
        ),
        *device_side,
        "Inspect the named ranks/nodes: thermal throttling, a busy neighbour process, "
        "slower data loading, a degraded GPU or link (nvidia-smi -q, dmesg).",
        "Exclude or replace the node if it stays late; rebalance data loading.",
        "Pacing does not fix a persistent straggler; it only hides the wait.",
    )


def changing_late() -> tuple[str, ...]:
    """Ranks late in part of the run only: the late rank changes, no node is bad."""
    return (
        "Look for what comes and goes on the hosts: other jobs or processes taking the "
        "CPU, data-loader stalls, frequency scaling; the host counters (syncpace run "
        "samples them) show CPU waiting and throttling.",
        "Pin each rank's threads to cores of its own and size OMP_NUM_THREADS to them.",
        "Do not exclude a node for it: the late rank changes from rerun to rerun.",
    )


def cpu_starvation(hosts: Sequence[str]) -> tuple[str, ...]:
    """Hosts whose job threads wait for a CPU or are throttled by their limit."""
    where = ", ".join(hosts)
    return (
        f"Give the job's ranks on {where} the CPUs they need: free CPUs (move what else "
        "runs there), or raise the job's CPU limit (the container's or the scheduler's "
        "CPU request); a starved rank also starves the threads that drive its "
        "communication.",
        "Reduce the threads each rank runs (OMP_NUM_THREADS, torch.set_num_threads, "
        "data-loader workers) to the cores it has: ranks x threads no more than the CPUs.",
        "Pin each rank's threads to cores of its own (taskset, numactl, the launcher's "
        "CPU binding) so that ranks do not take turns on the same cores.",
        "The late rank changes with whoever gets the CPU: excluding a node does not help.",
    )


def cpu_machine(hosts: Sequence[str]) -> tuple[str, ...]:
    """The job's ranks wait for a CPU on every host alike, or the starved host moves:
    the machine's share of CPUs, not one host."""
    return (
        f"Run fewer ranks per core: the job's ranks (and what else runs on "
        f"{', '.join(hosts)}) want more CPUs than the machine has; no one host is the "
        "cause.",
        "Pin each rank's threads to cores of its own (taskset, numactl, the launcher's "
        "CPU binding) and reduce the threads each rank runs (OMP_NUM_THREADS, "
        "torch.set_num_threads, data-loader workers) to the cores it has.",
        "Find the other work on the machine that takes the CPUs (top, the container's "
        "CPU share) and move it.",
        "The late rank moves from host to host: excluding a node does not help.",
    )


def locality_variance(local_rank: int) -> tuple[str, ...]:
    """One local rank slow on most nodes: its placement."""
    return (
        f"Check the CPU/NUMA affinity and NIC path of local rank {local_rank} "
        "(nvidia-smi topo -m, numactl -H): bind it to the NUMA node of its GPU and NIC.",
        "Pin data-loader workers to the right NUMA node; set NCCL_IB_HCA / "
        "NCCL_SOCKET_IFNAME to the NIC nearest the GPU.",
    )


def stall(
    where: str, steps: Sequence[int], every: int | None = None, at_once: bool = False
) -> tuple[str, ...]:
    """Stalls of ``where`` (ranks, in words) in ``steps``; ``every``: the steps between
    stalls that recur at one interval; ``at_once``: every rank stopped together."""
    step = steps[0]
    if every:
        how = (
            "every rank waits for: make it asynchronous (a background thread or process "
            "writing a copy), or less frequent"
            if at_once
            else "on one rank while the others wait: make it asynchronous, or spread it over "
            "the ranks"
        )
        return (
            f"Look at what runs on {where} every {every} steps (first at step {step}): a "
            f"checkpoint, an evaluation or a log flush {how}.",
            "A recurring event is not jitter: pacing does not help it.",
        )
    if len(steps) > 1:
        return (
            f"Look at what ran on {where} in steps {', '.join(map(str, steps))}: data-loader "
            "refills, garbage collection, a checkpoint or log flush, swapping, a preempted "
            "CPU.",
            "Events are not jitter: pacing does not help them.",
        )
    return (
        f"Look at what ran on {where} at step {step}: garbage collection, a "
        "checkpoint or log flush, data-loader refill, swapping, a preempted CPU.",
        "A one-off event is not jitter: pacing does not help it.",
    )


def sync_amplification() -> tuple[str, ...]:
    """Recurring jitter that every synchronisation amplifies."""
    return (
        "Reduce per-rank jitter: pin CPU threads, isolate cores, make data loading "
        "asynchronous, disable frequency scaling.",
        "Synchronize less often: gradient accumulation or local SGD.",
        "Try syncpace pacing under its A/B guard and keep it only if it measurably "
        "helps (the replay's what-if shows what it would do without network effects).",
    )


# The network -------------------------------------------------------------------------


def fabric_contention() -> tuple[str, ...]:
    """Other traffic, or the job's own, slowing the shared links."""
    return (
        "Look for other jobs or traffic on the same links and switches; check "
        "switch port counters and the oversubscription of the topology.",
        "Use topology-aware placement (ranks of a job under the same leaf) and "
        "hierarchical collectives that keep most traffic inside nodes.",
        "Check NCCL_ALGO / NCCL_CROSS_NIC and the NICs each rank uses.",
    )


def slow_link(nodes: Sequence[str]) -> tuple[str, ...]:
    """A slow link next to ``nodes``."""
    return (
        f"Check the links of {', '.join(nodes)}: negotiated speed (ethtool), errors "
        "and drops, a bad cable or port, other traffic through the same NIC.",
        "Run syncpace bench with the pair matrix to see which pair is slow.",
        "Move the job off the slow host or link; rings place it in every step.",
    )


def slow_fabric(nodes: Sequence[str]) -> tuple[str, ...]:
    """Collectives ending late on hosts that change, or on every host: no one link."""
    return (
        "No one host's link stands out: collectives end late on hosts that change, or "
        f"on every host ({', '.join(nodes)}) alike; do not move the job off one host.",
        "Run syncpace bench with the pair matrix: if every pair reaches the links' "
        "rate, the transfers are slowed by the job's side (CPU for the threads that "
        "drive them, other work on the machine), not the fabric.",
        "If every pair is slow alike, the fabric's capacity (switch, oversubscription, "
        "other jobs' traffic) is what the job's transfers get: fewer, larger transfers "
        "or more overlap help more than any one link.",
    )


# The trace's quality, and health -----------------------------------------------------


def incomplete_trace() -> tuple[str, ...]:
    return (
        "Metrics use only the ranks and collectives present; treat per-rank "
        "conclusions about missing ranks as unknown.",
        "Re-run with every rank traced (check the tracer's dropped_events and "
        "that each rank exits cleanly).",
    )


def insufficient_data() -> tuple[str, ...]:
    return (
        "Trace more iterations (a few past the warm-up), or lower --warmup-steps.",
        "If the job did run: check that its ranks reached init_process_group and "
        "called optimizer.step() or syncpace.step().",
        "Mark iterations by hand where no optimizer.step() runs under the tracer "
        "(evaluation, a custom update): import syncpace; call syncpace.step() once "
        "at the end of every iteration.",
    )


def clock_uncertainty(*, estimated: bool) -> tuple[str, ...]:
    """Clocks too uncertain for the skews; ``estimated``: offsets were estimated at all."""
    if not estimated:
        return ("Re-run with clock alignment enabled (see syncpace run --help).",)
    return (
        "Re-run with more clock rounds (SYNCPACE_CLOCK_ROUNDS) or a quieter "
        "store connection to tighten the offset estimate.",
        "Trust only skews well above the uncertainty.",
    )


def healthy() -> tuple[str, ...]:
    return ("Nothing to fix; re-check at larger scale.",)


def for_mode(mode: str, p: Parallelism) -> tuple[str, ...]:
    """A cause's actions when only its replay names it (no detector's detail: ranks,
    nodes, steps): its mode's function, where that needs nothing but the parallelism;
    none otherwise."""
    words = globals().get(mode)
    if not callable(words):
        return ()
    params = list(inspect.signature(words).parameters)
    if not params:
        return tuple(words())
    return tuple(words(p)) if params == ["p"] else ()
