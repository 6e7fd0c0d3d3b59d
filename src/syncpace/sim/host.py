"""The host (CPU) that issues each iteration's work, and how far it runs ahead of the device.

On a GPU the host only enqueues work: it may issue iteration ``i`` while the device still
runs earlier ones, bounded by the job's syncs (``.item()``, ``.cpu()``, the caching
allocator). Per rank, with ``R = run_ahead_steps``, ``host_i`` the host's time to issue
iteration ``i`` and ``end_j`` the device's end of iteration ``j`` (0 before the run)::

    free_i  = max(h_{i-1}, end_{i-1-R})                     # the host may start issuing i
    h_i     = free_i + host_i (+ the pacer's delay, slept on the host)
    begin_i = max(end_{i-1} (+ the delay, on the device's stream), h_i)

``h_i`` is when the host has issued all of iteration ``i``; the device begins it once it
has ended ``i - 1`` and the host has issued ``i`` (the whole iteration: the device never
starts on a half-issued one, a coarse bound that keeps the steady state right, one
iteration per ``max(host, device)``). ``R = 0`` is a job that syncs every iteration: the
host issues ``i`` only after the device ended ``i - 1``, and the two take turns. With
every ``host_i = 0`` and the delay on the device, ``h_i <= end_{i-1}`` always, so
``begin_i = end_{i-1} + delay``: the simulation without a host, bit for bit.

A delay on the device is absorbed where the device would have waited for the host
anyway; a delay slept on the host moves the device only where the host was the later of
the two (:func:`delay_shift`).
"""

from __future__ import annotations

import numpy as np

from syncpace.errors import ConfigError
from syncpace.sim.workload import WorkloadSpec


def host_times(wl: WorkloadSpec, iterations: int, world: int, seed: int) -> np.ndarray:
    """(I, R) seconds each rank's host takes to issue each iteration: ``host_ms``, or a
    ``host_ranks`` rank's own ``host_rank_ms``, times a lognormal(``host_jitter``) draw.

    The jitter has its own seed stream and is drawn only when on, so turning it on
    leaves every other draw of the run unchanged."""
    if any(r >= world for r in wl.host_ranks):
        raise ConfigError(f"host rank outside the job ({world} ranks): {list(wl.host_ranks)}")
    per_rank = np.full(world, wl.host_ms * 1e-3)
    per_rank[list(wl.host_ranks)] = np.array(wl.host_rank_ms) * 1e-3
    out = np.broadcast_to(per_rank, (iterations, world)).copy()
    if wl.host_jitter > 0:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 404]))
        out *= rng.lognormal(0.0, wl.host_jitter, out.shape)
    return out


def issue_start(prev_host_end: np.ndarray, device_end_back: np.ndarray | None) -> np.ndarray:
    """``free_i``: when each host may start issuing iteration ``i``: once it issued
    ``i - 1`` and its device ended ``i - 1 - R`` (``None`` before the run: no bound)."""
    if device_end_back is None:
        return prev_host_end
    return np.maximum(prev_host_end, device_end_back)


def device_begin(prev_end: np.ndarray, host_end: np.ndarray, device_delay: np.ndarray):
    """``begin_i = max(end_{i-1} + device delay, h_i)``: the device begins iteration ``i``
    once it ended ``i - 1`` (and ran the pacer's kernel) and the host has issued ``i``."""
    return np.maximum(prev_end + device_delay, host_end)


def delay_shift(
    prev_end: np.ndarray, host_end: np.ndarray, delay: np.ndarray, on_host: bool
) -> np.ndarray:
    """How far the pacer's ``delay`` moved each device's begin of the iteration.

    On the device it is absorbed by the time the device would have waited for the host
    (``h_i - end_{i-1}``, when positive); on the host (``host_end`` includes it) it moves
    the device only by what the host, delayed, ends after the device's own end. The
    device case is written so that, with no wait for the host, it is ``delay`` exactly."""
    if on_host:
        undelayed = np.maximum(prev_end, host_end - delay)
        return np.maximum(prev_end, host_end) - undelayed
    wait = np.maximum(host_end - prev_end, 0.0)
    return np.maximum(delay - wait, 0.0)
