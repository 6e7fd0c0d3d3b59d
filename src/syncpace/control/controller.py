"""The live pacing controller inside each rank.

At the end of every step the rank shares its arrival at the step's sync point (the
first collective, before any pacing delay) and its step time over the side channel;
``lag`` steps later every rank holds the same numbers, feeds them to the same
:class:`~syncpace.control.pacer.Pacer` (policy, lag and A/B guard, the object the
simulator runs too), and so reaches the same decision. The decision is the delay this
rank sleeps before its first collective of the step it applies to.
Any channel failure or timeout turns pacing off for the rest of the run and is
logged once; the job's collectives are never touched.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Protocol

import numpy as np

from syncpace.control.ab import Verdict
from syncpace.control.config import ControllerConfig, PacingConfig
from syncpace.control.pacer import Pacer

log = logging.getLogger("syncpace")


class Channel(Protocol):
    def submit(self, step: int, values: list[float]) -> None: ...

    def collect(self, step: int) -> np.ndarray: ...


class PacingController:
    def __init__(
        self,
        config: ControllerConfig,
        pacing_config: PacingConfig,
        rank: int,
        world_size: int,
        channel: Channel,
    ) -> None:
        self.config = config
        self.rank = rank
        self.pacer = Pacer(pacing_config, world_size)
        self._channel = channel
        self.enabled = True
        self.suspended = False
        self.error: str | None = None
        self.steps = 0
        self.paced_steps = 0
        self.delay_sum_s = 0.0
        self.delay_max_s = 0.0
        self.bound_at_max_s = 0.0
        self.bound_s = 0.0
        self.verdict: Verdict | None = None
        self._recent: list[float] = []
        self.last_line = ""

    # Hot path: first collective of a step ------------------------------------------
    def delay_for(self, step: int) -> float:
        delays, bound = self.pacer.delays_for(step)
        if self.suspended:  # switched off from outside: decide on, delay nothing
            return 0.0
        delay = 0.0 if delays is None else float(delays[self.rank])
        if delay > 0:
            self.paced_steps += 1
            self.delay_sum_s += delay
            if delay > self.delay_max_s:
                self.delay_max_s, self.bound_at_max_s = delay, bound
        return delay

    # Step boundary ---------------------------------------------------------------------
    def on_step_end(self, step: int, arrival_s: float, duration_s: float) -> None:
        if not self.enabled:
            return
        self.steps = step + 1
        try:
            self._channel.submit(step, [arrival_s, duration_s])
            gathered = step - self.pacer.config.lag + 1
            if gathered >= 0:
                self._decide(gathered, self._channel.collect(gathered))
        except Exception as exc:
            self.fail(str(exc))

    def _decide(self, step: int, data: np.ndarray) -> None:
        arrivals, durations = data[:, 0], data[:, 1]
        step_time = float(durations.max())
        self._recent = (self._recent + [step_time])[-100:]
        result = self.pacer.observe(step, arrivals, step_time)
        if result is None:  # a rank issued no collective in that step
            return
        self.bound_s = result.bound_s
        if result.verdict is not None:
            self.verdict = result.verdict
            log.warning("syncpace: pacing A/B verdict at step %d: %s", step, result.verdict.state)
        every = self.config.log_every
        if self.rank == 0 and every and step % every == 0:
            self.last_line = self._live_line(step, arrivals, result.pacing)
            log.warning("%s", self.last_line)

    def _live_line(self, step: int, arrivals: np.ndarray, pacing: bool) -> str:
        recent = np.asarray(self._recent)
        slowest = int(np.argmax(arrivals))
        state = self.pacer.state
        return (
            f"syncpace step {step}: step p50 {np.median(recent) * 1e3:.1f} ms "
            f"p99 {np.quantile(recent, 0.99) * 1e3:.1f} ms, arrival skew "
            f"{(arrivals.max() - arrivals.min()) * 1e3:.1f} ms (last: rank {slowest}), "
            f"pacing {'on' if pacing else 'off'} ({state})"
        )

    def fail(self, reason: str) -> None:
        if self.enabled:
            log.warning("syncpace: pacing turned off for the rest of the run: %s", reason)
        self.enabled = False
        self.error = reason
        self.pacer.clear()

    # Reporting ---------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        verdict = self.pacer.summary_verdict()
        return {
            "policy": self.pacer.config.strategy,
            "policy_config": dataclasses.asdict(self.pacer.config),
            "controller_config": dataclasses.asdict(self.config),
            "steps": self.steps,
            "paced_steps": self.paced_steps,
            "fraction_paced": self.paced_steps / self.steps if self.steps else 0.0,
            "delay_sum_s": round(self.delay_sum_s, 6),
            "delay_max_s": round(self.delay_max_s, 6),
            "bound_s": round(self.bound_s, 6),
            "bound_at_max_delay_s": round(self.bound_at_max_s, 6),
            "ab": None if verdict is None else verdict.to_json(),
            "ab_state": None if self.pacer.guard is None else self.pacer.guard.state,
            "enabled": self.enabled,
            "error": self.error,
        }
