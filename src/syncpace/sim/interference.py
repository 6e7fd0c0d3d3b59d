"""Interference between ranks that share a node, while some of them wait.

Assumption (a switch, ``mode``): a rank that has finished its compute and waits at the
synchronisation point busy-polls (NCCL's proxy thread and the spinning kernel, or the
CPU loop of gloo). Polling takes shared node resources the still-computing ranks need
(host cores that feed their launches and data loaders, memory and PCIe bandwidth, the
node's power budget), so each waiting neighbour slows a computing rank by
``slowdown / (G - 1)``: with every neighbour waiting it computes ``1 + slowdown`` times
slower. A rank the pacer holds back *sleeps* (it does not poll), so pacing early ranks
removes part of that load. With ``mode = "none"`` waiting is free and pacing can only
add delay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from syncpace.config import check_choice, check_numbers, setting

MODES = ("none", "spin")


@dataclass(kw_only=True, slots=True)
class InterferenceSpec:
    mode: str = setting("none", "Waiting ranks slow co-located computing ranks: none or spin.")
    slowdown: float = setting(0.3, "spin: compute slowdown with every neighbour waiting.")

    def __post_init__(self) -> None:
        check_numbers(self, slowdown="[0, 100]")
        check_choice(self, "mode", MODES)


def stretch(ready: np.ndarray, gpus: int, spec: InterferenceSpec) -> np.ndarray:
    """Compute-end times once waiting neighbours slow the ranks still computing.

    ``ready`` (R,) are the ends without interference, ranks node-major. On each node the
    ranks finish in the same order; between the j-th and (j+1)-th finish the j waiting
    ranks stretch the remaining work by ``1 + slowdown * j / (G - 1)``.
    """
    if spec.mode == "none" or gpus < 2 or spec.slowdown == 0:
        return ready
    by_node = ready.reshape(-1, gpus)
    order = np.argsort(by_node, axis=1, kind="stable")
    s = np.take_along_axis(by_node, order, axis=1)
    factor = 1.0 + spec.slowdown * np.arange(gpus) / (gpus - 1)
    gaps = np.diff(s, axis=1) * factor[None, 1:]
    t = s[:, :1] + np.concatenate([np.zeros((s.shape[0], 1)), np.cumsum(gaps, axis=1)], axis=1)
    out = np.empty_like(by_node)
    np.put_along_axis(out, order, t, axis=1)
    return out.reshape(-1)
