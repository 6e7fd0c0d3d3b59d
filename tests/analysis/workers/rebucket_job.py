"""A gloo rank of one DDP model trained two ways, phase by phase: every gradient in one
bucket reduced after backward (``bucket_cap_mb`` larger than the model) and the same
model with a bucket per layer reduced during backward (``bucket_cap_mb`` of one layer).

Backward's compute is sleep in autograd nodes between the layers, so each layer's
gradient is ready a share of backward after the previous one's, as in a real model,
and the buckets, not the test machine's cores, set the timing. Phases alternate
``one``, ``bucketed``, ... after a warm-up phase of the one-bucket model; the trace is
cut into them afterwards (steps are counted across phases).

Arguments: STEPS_PER_PHASE PAIRS FWD_MS BWD_MS LAYERS WIDTH.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

import syncpace

# the scenarios job's autograd sleep: backward's compute the CPU does not do
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scenarios")
)
from job import Sleep  # noqa: E402


class Net(nn.Module):
    def __init__(self, layers: int, width: int, bwd_s: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.nap = bwd_s / layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # a nap after each layer's output: in backward it runs before that layer's
        # gradients are computed, so the first layer's come last, all of backward later
        for layer in self.layers:
            x = Sleep.apply(torch.relu(layer(x)), self.nap)
        return x


def main() -> None:
    steps, pairs = int(sys.argv[1]), int(sys.argv[2])
    fwd_s, bwd_s = float(sys.argv[3]) / 1e3, float(sys.argv[4]) / 1e3
    layers, width = int(sys.argv[5]), int(sys.argv[6])
    syncpace.attach(os.environ["TRACE_DIR"])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    layer_mb = (width * width + width) * 4 / 2**20
    one = nn.parallel.DistributedDataParallel(
        Net(layers, width, bwd_s), bucket_cap_mb=2 * layers * layer_mb
    )
    bucketed = nn.parallel.DistributedDataParallel(
        Net(layers, width, bwd_s), bucket_cap_mb=layer_mb
    )
    x = torch.ones(1, width)
    for model in [one] + [one, bucketed] * pairs:
        for _ in range(steps):
            time.sleep(fwd_s)
            model(x).sum().backward()
            model.zero_grad(set_to_none=True)
            syncpace.step()
    dist.barrier()
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
