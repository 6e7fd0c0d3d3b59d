"""One process of the GPU check (launched by gpu_check.py, once per rank).

    python _gpu_check_worker.py KIND SPEC_JSON

KIND names a job of :data:`WORKERS`; SPEC_JSON holds its settings: ``device``
(``cuda``; ``cpu`` runs the same code on gloo, to try a job out where there is no
GPU), ``backend`` (``nccl`` or ``gloo``), ``trace`` (a run directory: the process
is traced with ``syncpace.attach`` and ``settings``; absent: untraced) and ``result``
(the JSON file this rank writes, ``{rank}`` in its name). Rank and rendezvous come from
the environment, as torchrun sets them. What a job measured goes to its result file,
written before the process group is destroyed (so a hang at teardown loses nothing);
a failure is a traceback on stderr and a non-zero exit.

Every rank of a job runs on GPU 0: the check is made for a machine with one GPU.
"""

from __future__ import annotations

import json
import os
import pickle
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from _gpu_check_figures import MARKER, nccl_version_text
from torch import nn

import syncpace

#: Flight Recorder dumps, newest API first: NCCL's own ring (``_dump_nccl_trace*``,
#: torch >= 2.3) before the backend-neutral one (``_dump_fr_trace*``, later torch).
FR_DUMPS = ("_dump_nccl_trace_json", "_dump_nccl_trace", "_dump_fr_trace_json", "_dump_fr_trace")


# Common -----------------------------------------------------------------------------------
def join(spec: dict[str, Any]) -> tuple[int, int, torch.device]:
    """Attach the tracer when the spec traces, then join the job's process group."""
    device = (
        torch.device("cuda", 0) if spec.get("device", "cuda") == "cuda" else torch.device("cpu")
    )
    if device.type == "cuda":
        torch.cuda.set_device(device)  # every rank shares the one GPU
    if spec.get("trace"):
        syncpace.attach(spec["trace"], **spec.get("settings", {}))
    dist.init_process_group(spec["backend"])
    return dist.get_rank(), dist.get_world_size(), device


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def elapsed_ms(device: torch.device, work: Callable[[], None], repeat: int) -> float:
    """Device time of ``work`` (ms, the mean of ``repeat`` runs back to back)."""
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(repeat):
            work()
        return (time.perf_counter() - start) * 1e3 / repeat
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        work()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeat


def queued_matmuls(
    device: torch.device, target_ms: float, n: int
) -> tuple[Callable[[], None], dict[str, Any]]:
    """Work that keeps the device busy about ``target_ms`` without the host waiting:
    as many bf16 ``n`` x ``n`` matrix products as that takes, measured here first."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out = torch.empty_like(a)

    def one() -> None:
        torch.matmul(a, a, out=out)

    elapsed_ms(device, one, 3)  # cuBLAS set-up, clocks up
    each_ms = elapsed_ms(device, one, 5)
    count = max(1, round(target_ms / each_ms))

    def work() -> None:
        for _ in range(count):
            one()

    return work, {"matmul_ms": round(each_ms, 4), "matmuls": count, "gpu_ms": each_ms * count}


# (a) Device times against the profiler ----------------------------------------------------
def devtime(spec: dict[str, Any]) -> dict[str, Any]:
    """All-reduces of one large tensor, each marked for the profiler, the device idle
    before each (synchronised, then ``gap_s`` of host sleep), so the profiler's device
    work of call *i* lies between mark *i* and mark *i + 1*; the warm-up calls are
    step 0, measured call *i* is step *i + 1* (one call per step)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    rank, world, device = join(spec)
    x = torch.zeros(spec["numel"], device=device)
    # One NCCL rank runs no kernel for an in-place sum (a no-op there); an average runs
    # its one-rank reduce kernel over the whole buffer. gloo has no average.
    op = dist.ReduceOp.AVG if spec["backend"] == "nccl" else dist.ReduceOp.SUM
    for _ in range(3):  # communicator set-up and first-call costs
        dist.all_reduce(x, op=op)
    synchronize(device)
    syncpace.step()
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(spec["calls"]):
            synchronize(device)
            time.sleep(spec["gap_s"])
            with record_function(MARKER):
                dist.all_reduce(x, op=op)
            syncpace.step()
        synchronize(device)
    profile_path = Path(spec["profile"].format(rank=rank))
    profile_path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(profile_path))
    return {"rank": rank, "world": world, "op": str(op), "bytes": x.numel() * 4}


# (b) A CPU-bound and a GPU-bound rank -----------------------------------------------------
def bound(spec: dict[str, Any]) -> dict[str, Any]:
    """Rank ``gpu_rank`` queues ``gpu_ms`` of matrix products before each all-reduce
    (its host issues the call at once, its device arrives late); every other rank sleeps
    ``sleep_ms`` on the host before it (its device is idle and arrives as it issues)."""
    rank, world, device = join(spec)
    x = torch.zeros(spec["numel"], device=device)
    facts: dict[str, Any] = {"rank": rank}
    if rank == spec["gpu_rank"]:
        work, measured = queued_matmuls(device, spec["gpu_ms"], spec["matmul_n"])
        facts.update(measured, role="gpu-bound")
    else:
        sleep_s = spec["sleep_ms"] / 1e3

        def work() -> None:
            time.sleep(sleep_s)

        facts.update(role="cpu-bound", sleep_ms=spec["sleep_ms"])
    dist.barrier()  # the matrix products' measurement is not a step of the job
    synchronize(device)
    syncpace.step()
    for _ in range(spec["warmup"] + spec["steps"]):
        work()
        dist.all_reduce(x)
        syncpace.step()
    synchronize(device)
    return facts


# (c) Pacing on the device ------------------------------------------------------------------
class FixedDelays:
    """The pacer's side of the controller: a delay for chosen steps."""

    def __init__(self, delays_s: dict[int, float]) -> None:
        self.delays_s = delays_s

    def delay_for(self, step: int) -> float:
        return self.delays_s.get(step, 0.0)

    def on_step_end(self, *args: object) -> None:
        pass

    def summary(self) -> dict:
        return {"fixed_delays_s": {str(k): v for k, v in self.delays_s.items()}}


def pacing(spec: dict[str, Any]) -> dict[str, Any]:
    """One traced rank; each step queues ``gpu_ms`` of matrix products, then one
    all-reduce; the controller delays chosen steps. The first delay the tracer places
    on a device starts the spin kernel's calibration and is slept on the host: it is
    given at ``calibrate_step``, with the device idle around it (a calibration that
    shares the GPU with matrix products would measure their queueing too)."""
    from syncpace.capture import tracer as tracer_module

    rank, world, device = join(spec)
    tracer = tracer_module.TRACER
    delays = {int(step): float(s) for step, s in spec["delays_s"].items()}
    tracer.controller = FixedDelays(delays)  # one rank runs no controller of its own
    work, facts = queued_matmuls(device, spec["gpu_ms"], spec["matmul_n"])
    x = torch.zeros(spec["numel"], device=device)
    synchronize(device)
    for step in range(spec["steps"]):
        if step == spec["calibrate_step"]:
            synchronize(device)
        else:
            work()
        dist.all_reduce(x)
        syncpace.step()
        if step == spec["calibrate_step"]:
            synchronize(device)
            time.sleep(0.05)  # the calibration's events complete on an idle device
    synchronize(device)
    timeline = tracer.device_timeline
    facts["cycles_per_ns"] = getattr(getattr(timeline, "device", None), "_cycles_per_ns", None)
    facts["device_delays"] = tracer.device_delays
    return facts


# (d) Real workloads at world size 1 -----------------------------------------------------------
HIDDEN = 512  # a layer's weight is 1 MB: a bucket each
BATCH = 32


def _blocks(n: int) -> nn.Sequential:
    return nn.Sequential(
        *[nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU()) for _ in range(n)],
        nn.Linear(HIDDEN, 1),
    )


def compiled_ddp(device: torch.device) -> tuple[Any, Callable[[], None]]:
    """``torch.compile(DDP(model))``: Dynamo's DDPOptimizer splits the graph at the
    buckets (1 MB: no smaller than DDP's first bucket, which DDPOptimizer requires)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [device.index] if device.type == "cuda" else None
    model = _blocks(4).to(device)
    return torch.compile(DDP(model, device_ids=ids, bucket_cap_mb=1.0)), lambda: None


def fsdp2(device: torch.device) -> tuple[Any, Callable[[], None]]:
    """FSDP2: every block ``fully_shard``-ed, then the root (its own all-gathers and
    reduce-scatters; recent torch skips both at world size 1, so the counts compare
    zero with zero there). ``torch.distributed.fsdp.fully_shard`` since torch 2.6,
    under ``_composable`` in 2.4 and 2.5."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    model = _blocks(3).to(device)
    for block in model[:-1]:
        fully_shard(block)
    fully_shard(model)
    return model, lambda: None


def mesh_1d(device: torch.device) -> tuple[Any, Callable[[], None]]:
    """A one-dimensional device mesh; its group broadcasts the parameters once and
    all-reduces every gradient (what DDP does, by hand, on the mesh's group)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (dist.get_world_size(),), mesh_dim_names=("dp",))
    group = mesh.get_group()  # a 1-D mesh has one group: no dimension to name
    model = _blocks(3).to(device)
    for p in model.parameters():
        dist.broadcast(p.data, src=0, group=group)

    def reduce_grads() -> None:
        for p in model.parameters():
            dist.all_reduce(p.grad, group=group)
            p.grad.div_(group.size())

    return model, reduce_grads


WORKLOADS = {"compile_ddp": compiled_ddp, "fsdp2": fsdp2, "mesh": mesh_1d}


def workload(spec: dict[str, Any]) -> dict[str, Any]:
    """``steps`` SGD steps of one workload, the same data and seed traced or not; the
    loss of every step exactly (``float.hex``) and the Flight Recorder's calls."""
    rank, world, device = join(spec)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(0)
    model, reduce_grads = WORKLOADS[spec["workload"]](device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(spec["steps"]):
        g = torch.Generator().manual_seed(1000 * rank + step)
        x, y = torch.randn(BATCH, HIDDEN, generator=g), torch.randn(BATCH, 1, generator=g)
        loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        reduce_grads()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.item()).hex())
    synchronize(device)
    return {"rank": rank, "losses": losses, "fr": flight_recorder()}


class _PlainUnpickler(pickle.Unpickler):
    """A Flight Recorder dump holds only plain containers: refuse any class."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing {module}.{name}")


def _decode_dump(raw: Any) -> dict[str, Any]:
    if isinstance(raw, bytes) and raw[:1] == b"{":
        raw = raw.decode()
    if isinstance(raw, str):
        return json.loads(raw)
    import io

    return _PlainUnpickler(io.BytesIO(raw)).load()


def flight_recorder() -> dict[str, Any]:
    """The profiling names of the Flight Recorder's entries (``"nccl:all_reduce"``),
    from the first dump of :data:`FR_DUMPS` this torch has that holds any (a job with
    no collective reads as the first dump that answered, with no names); what was
    tried, where no dump answers."""
    from torch._C import _distributed_c10d as c10d

    tried, empty = [], None
    for name in FR_DUMPS:
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            data = _decode_dump(dump())
            entries = data.get("entries") or []
        except Exception as exc:  # an API of another signature: the next one
            tried.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        found = {"source": name, "version": data.get("version"), "tried": tried}
        if entries:
            return dict(found, names=[str(e.get("profiling_name", "")) for e in entries])
        empty = empty or dict(found, names=[])
    return empty or {"error": "; ".join(tried) or "this torch has no Flight Recorder dump"}


# (e) Overhead --------------------------------------------------------------------------------
def overhead(spec: dict[str, Any]) -> dict[str, Any]:
    """A bf16 stack of transformer encoder layers under DDP with small buckets; the wall
    time of each step (ending in a device synchronisation) and the process CPU time it
    took (every thread: the tracer's flush thread is part of the cost)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world, device = join(spec)
    torch.manual_seed(0)
    d = spec["d_model"]
    layers = [
        nn.TransformerEncoderLayer(d, spec["heads"], 4 * d, dropout=0.0, batch_first=True)
        for _ in range(spec["layers"])
    ]
    model = nn.Sequential(*layers).to(device=device, dtype=torch.bfloat16)
    ids = [device.index] if device.type == "cuda" else None
    net = DDP(model, device_ids=ids, bucket_cap_mb=spec["bucket_cap_mb"])
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    x = torch.randn(spec["batch"], spec["seq"], d, device=device, dtype=torch.bfloat16)
    step_s, cpu_s = [], []
    for i in range(spec["warmup"] + spec["steps"]):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        net(x).float().square().mean().backward()
        opt.step()
        synchronize(device)
        if i >= spec["warmup"]:
            step_s.append(time.perf_counter() - wall0)
            cpu_s.append(time.process_time() - cpu0)
    return {"rank": rank, "traced": bool(spec.get("trace")), "step_s": step_s, "cpu_s": cpu_s}


# The machine -----------------------------------------------------------------------------------
def _nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.strip().splitlines()
    return lines[0].strip() if lines else None


def _fact(read: Callable[[], Any]) -> Any:
    """One fact of the machine; what went wrong instead, so the others are still read."""
    try:
        return read()
    except Exception as exc:
        return f"unavailable: {type(exc).__name__}: {exc}"


def environment(spec: dict[str, Any]) -> dict[str, Any]:
    """GPU model, driver, CUDA, NCCL and torch versions (no process group)."""
    props = _fact(lambda: torch.cuda.get_device_properties(0))
    has_props = not isinstance(props, str)
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": _fact(lambda: nccl_version_text(torch.cuda.nccl.version())),
        "gpu": _fact(lambda: torch.cuda.get_device_name(0)),
        "gpu_memory_gib": round(props.total_memory / 2**30, 1) if has_props else props,
        "capability": f"{props.major}.{props.minor}" if has_props else None,
        "sms": props.multi_processor_count if has_props else None,
        "gpus_visible": _fact(torch.cuda.device_count),
        "driver": _nvidia_smi("driver_version"),
        "sm_clock_mhz": _nvidia_smi("clocks.sm,clocks.max.sm"),
        "python": platform.python_version(),
        "syncpace": syncpace.__version__,
        "gloo": dist.is_gloo_available(),
        "nccl_available": dist.is_nccl_available(),
        "cpus": os.cpu_count(),
    }


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "env": environment,
    "devtime": devtime,
    "bound": bound,
    "pacing": pacing,
    "workload": workload,
    "overhead": overhead,
}


def main() -> None:
    kind, spec = sys.argv[1], json.loads(sys.argv[2])
    result = WORKERS[kind](spec)
    path = Path(spec["result"].format(rank=os.environ.get("RANK", "0")))
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(result))
    partial.replace(path)
    if dist.is_initialized():
        dist.destroy_process_group()  # closes the trace


if __name__ == "__main__":
    main()
