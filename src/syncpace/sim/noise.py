"""Per-rank compute noise over (iterations x ranks), seeded and reproducible.

Every source draws from its own child of one ``SeedSequence``, so switching one source
on or off leaves the draws of the others unchanged. Two outputs:

* ``mult`` — a multiplier of each rank's compute time in each iteration: persistent
  per-rank speed spread, per-iteration jitter (lognormal or heavy-tailed), persistent
  slow nodes, thermal-throttling episodes of a whole node;
* ``compute_only`` — the jitter resampled from measured quantiles (``empirical``): a
  multiplier of the compute alone, not of the backward's pace or the optimizer that
  ``mult`` scales too, since what a trace measures is the time a rank took to arrive
  (on a loaded machine mostly time it was not running), not a slower processor;
* ``post_s`` — time a rank spends after its last exit beyond the optimizer (measured
  ``post_ms``: a rank descheduled after the exit ends its step late and holds the
  iteration's boundary back);
* ``stall_s`` — additive stalls: OS-noise bursts, data-loader hiccups, and the extra
  time of ranks that arrive late by a measured amount (``extra_ranks``: each draws its
  own table of quantiles every iteration, and takes no jitter besides);
* ``service_p`` — where an extra rank's measured steps are kept whole (``extra_steps``):
  each iteration it draws one of them, its extra time (in ``stall_s``), its optimizer
  beyond the workload's (in ``post_s``) and where the communication after its arrival
  stood in the network's measured spread, together, so that what slowed one phase of a
  step and the next (a host busy for the whole step) is drawn as it came.

A table of quantiles is sampled by its inverse CDF: the quantiles are taken at evenly
spaced probabilities from 0 to 1, a uniform draw is mapped through them, linear in
between, so the draws follow the measured distribution (bounded by its extremes)
without assuming its shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from syncpace.config import check_choice, check_numbers, setting
from syncpace.errors import ConfigError

DISTRIBUTIONS = ("lognormal", "pareto", "empirical")


@dataclass(kw_only=True, slots=True)
class NoiseSpec:
    jitter: float = setting(0.02, "Per-iteration compute jitter: lognormal sigma / tail scale.")
    distribution: str = setting(
        "lognormal", "Jitter: lognormal, pareto (heavy tail) or empirical (from quantiles)."
    )
    quantiles: tuple[float, ...] = setting(
        (), "empirical: the jitter multiplier's quantiles at evenly spaced probabilities 0..1."
    )
    tail_shape: float = setting(3.0, "pareto: shape a of the Lomax tail (a > 1).")
    rank_spread: float = setting(0.0, "Persistent per-rank speed spread (lognormal sigma).")
    slow_nodes: tuple[int, ...] = setting((), "Nodes that are persistently slow.")
    slow_factor: float = setting(1.15, "Compute-time factor of a slow node.")
    slow_ranks: tuple[int, ...] = setting((), "Single ranks that are persistently slow.")
    slow_factors: tuple[float, ...] = setting(
        (), "Each slow rank's own compute factor, in slow_ranks' order (default: slow_factor)."
    )
    os_burst_prob: float = setting(0.0, "Chance per rank and iteration of an OS-noise burst.")
    os_burst_ms: float = setting(2.0, "Mean OS-noise burst (exponential), ms.")
    throttle_rate: float = setting(
        0.0, "Chance per node and iteration a throttling episode starts."
    )
    throttle_steps: float = setting(20.0, "Mean length of a throttling episode, iterations.")
    throttle_factor: float = setting(1.3, "Compute-time factor while throttled.")
    loader_prob: float = setting(0.0, "Chance per rank and iteration of a data-loader hiccup.")
    loader_ms: float = setting(20.0, "Median data-loader hiccup (lognormal sigma 0.5), ms.")
    post_ms: tuple[float, ...] = setting(
        (),
        "Quantiles of a rank's time from its last exit to its step's end beyond the "
        "optimizer, ms (may be negative), drawn per rank and iteration; extra ranks excepted.",
    )
    extra_ranks: tuple[int, ...] = setting(
        (), "Ranks that take measured extra time before each iteration's compute."
    )
    extra_ms: tuple[float, ...] = setting(
        (), "Their extra time's quantiles, ms: one table of equal length per extra rank, in order."
    )
    extra_steps: tuple[float, ...] = setting(
        (),
        "Their measured steps, each drawn whole instead of extra_ms: (extra time ms, "
        "optimizer beyond the workload's ms, the probability at which the communication "
        "after its arrival stood in network.service_quantiles, -1 where it was not last) "
        "per step; one table of equal length per extra rank, in order.",
    )

    def __post_init__(self) -> None:
        check_numbers(
            self,
            jitter="[0, 10]",
            tail_shape="(1, 1000]",
            rank_spread="[0, 10]",
            slow_nodes="[0, 1000000]",
            slow_factor="(0, 1000]",
            slow_ranks="[0, 100000000]",
            slow_factors="(0, 1000]",
            os_burst_prob="[0, 1]",
            os_burst_ms="[0, 1e7]",
            throttle_rate="[0, 1]",
            throttle_steps="[1, 1e7]",
            throttle_factor="(0, 1000]",
            loader_prob="[0, 1]",
            loader_ms="[0, 1e7]",
            quantiles="(0, 1000]",
            extra_ranks="[0, 100000000]",
            extra_ms="[0, 1e7]",
            post_ms="[-1e7, 1e7]",
            extra_steps="[-1e7, 1e7]",
        )
        check_choice(self, "distribution", DISTRIBUTIONS)
        self.quantiles = _table(self.quantiles, "quantiles")
        self.extra_ranks = tuple(int(r) for r in self.extra_ranks)
        self.extra_ms = _table(self.extra_ms, "extra_ms")
        self.post_ms = _table(self.post_ms, "post_ms")
        if len(self.post_ms) == 1:
            raise ConfigError("post_ms needs at least 2 quantiles")
        if self.distribution == "empirical" and len(self.quantiles) < 2:
            raise ConfigError("distribution = empirical needs at least 2 quantiles")
        if self.extra_ranks and (
            not self.extra_ms or len(self.extra_ms) % len(self.extra_ranks) != 0
        ):
            raise ConfigError(
                f"extra_ms needs one table of equal length per extra rank "
                f"({len(self.extra_ranks)}), got {len(self.extra_ms)} values"
            )
        if self.extra_ms and not self.extra_ranks:
            raise ConfigError("extra_ms without extra_ranks")
        self.extra_steps = tuple(float(v) for v in self.extra_steps)
        if self.extra_steps and len(self.extra_steps) % (3 * max(len(self.extra_ranks), 1)):
            raise ConfigError(
                f"extra_steps needs one table of (extra, optimizer, communication) rows per "
                f"extra rank ({len(self.extra_ranks)}), got {len(self.extra_steps)} values"
            )
        if self.extra_steps and not self.extra_ranks:
            raise ConfigError("extra_steps without extra_ranks")
        rows = self.step_tables().reshape(-1, 3)
        if (rows[:, 0] < 0).any():
            raise ConfigError("extra_steps: an extra time below 0")
        if ((rows[:, 2] != -1) & ((rows[:, 2] < 0) | (rows[:, 2] > 1))).any():
            raise ConfigError("extra_steps: a communication probability outside 0..1 (or -1)")
        self.slow_nodes = tuple(int(n) for n in self.slow_nodes)
        self.slow_ranks = tuple(int(r) for r in self.slow_ranks)
        self.slow_factors = tuple(float(f) for f in self.slow_factors)
        if self.slow_factors and len(self.slow_factors) != len(self.slow_ranks):
            raise ConfigError(
                f"slow_factors needs one factor per slow rank ({len(self.slow_ranks)}), "
                f"got {len(self.slow_factors)}"
            )

    def extra_tables(self) -> np.ndarray:
        """(extra ranks, quantiles) of each extra rank's table, in ms."""
        if not self.extra_ranks:
            return np.zeros((0, 0))
        return np.asarray(self.extra_ms).reshape(len(self.extra_ranks), -1)

    def step_tables(self) -> np.ndarray:
        """(extra ranks, steps, 3) of each extra rank's measured steps: extra time (ms),
        optimizer beyond the workload's (ms), the communication's probability in the
        network's spread (-1: the rank was not last)."""
        if not self.extra_steps:
            return np.zeros((0, 0, 3))
        return np.asarray(self.extra_steps).reshape(len(self.extra_ranks), -1, 3)


def _table(values: tuple[float, ...], name: str) -> tuple[float, ...]:
    out = tuple(float(v) for v in values)
    if any(b < a for a, b in zip(out, out[1:], strict=False)):
        raise ConfigError(f"{name}: quantiles must not decrease")
    return out


def resample(rng: np.random.Generator, table: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Draws of ``shape`` from the quantiles ``table`` (evenly spaced probabilities 0..1)
    by the inverse CDF, linear between them; a table of one value is that value."""
    return quantile_at(table, rng.random(shape))


def quantile_at(table: np.ndarray, p: np.ndarray | float) -> np.ndarray:
    """The quantiles ``table`` (evenly spaced probabilities 0..1) read at probability
    ``p``, linear between them; a table of one value is that value."""
    if table.size == 1:
        return np.full(np.shape(p), float(table[0]))
    return np.interp(p, np.linspace(0.0, 1.0, table.size), table)


@dataclass(frozen=True)
class NoiseDraw:
    mult: np.ndarray  # (I, R) compute-time multiplier
    stall_s: np.ndarray  # (I, R) additive stall, seconds
    throttled: np.ndarray  # (I, N) node throttled in that iteration
    #: (I, R) a multiplier of the compute alone (the measured jitter): time a rank lost
    #: before its compute, which neither its backward's pace nor its optimizer share
    compute_only: np.ndarray | None = None
    #: (I, R) seconds added after a rank's exit, before its step ends (``post_ms``)
    post_s: np.ndarray | None = None
    #: (I, R) where in the network's spread (a probability) the communication of an
    #: iteration this rank arrives last in stands, from the step it drew (NaN: the
    #: network's own draw)
    service_p: np.ndarray | None = None


def draw(spec: NoiseSpec, iterations: int, nodes: int, gpus: int, seed: int) -> NoiseDraw:
    world = nodes * gpus
    if any(n >= nodes for n in spec.slow_nodes) or any(r >= world for r in spec.slow_ranks):
        raise ConfigError(f"slow node/rank outside the job ({nodes} nodes, {world} ranks)")
    rng = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(6)]
    shape = (iterations, world)
    mult = np.ones(shape)
    if spec.rank_spread:
        mult *= rng[0].lognormal(0.0, spec.rank_spread, world)[None, :]
    if any(r >= world for r in spec.extra_ranks):
        raise ConfigError(f"extra rank outside the job ({world} ranks)")
    extra = list(spec.extra_ranks)
    compute_only = None
    if spec.distribution == "empirical":
        compute_only = resample(rng[1], np.asarray(spec.quantiles), shape)
        compute_only[:, extra] = 1.0  # an extra rank's table is all of its variation
    elif spec.jitter:
        if spec.distribution == "lognormal":
            jitter = rng[1].lognormal(0.0, spec.jitter, shape)
        else:
            jitter = 1.0 + spec.jitter * rng[1].pareto(spec.tail_shape, shape)
        if extra:
            jitter[:, extra] = 1.0
        mult *= jitter
    node_factor = np.ones(nodes)
    node_factor[list(spec.slow_nodes)] = spec.slow_factor
    mult *= np.repeat(node_factor, gpus)[None, :]
    if spec.slow_ranks:
        factors = spec.slow_factors or (spec.slow_factor,) * len(spec.slow_ranks)
        mult[:, list(spec.slow_ranks)] *= np.array(factors)[None, :]
    throttled = _episodes(rng[2], iterations, nodes, spec.throttle_rate, spec.throttle_steps)
    mult *= np.where(np.repeat(throttled, gpus, axis=1), spec.throttle_factor, 1.0)
    stall = np.zeros(shape)
    if spec.os_burst_prob:
        hit = rng[3].random(shape) < spec.os_burst_prob
        stall += np.where(hit, rng[3].exponential(spec.os_burst_ms * 1e-3, shape), 0.0)
    if spec.loader_prob:
        hit = rng[4].random(shape) < spec.loader_prob
        stall += np.where(hit, spec.loader_ms * 1e-3 * rng[4].lognormal(0.0, 0.5, shape), 0.0)
    if extra and not spec.extra_steps:
        tables = spec.extra_tables()
        for j, r in enumerate(extra):
            stall[:, r] += resample(rng[5], tables[j], (iterations,)) * 1e-3
    post = _post(spec, shape, seed)
    service_p = _whole_steps(spec, stall, post, seed)
    return NoiseDraw(mult, stall, throttled, compute_only, post, service_p)


def _post(spec: NoiseSpec, shape: tuple[int, int], seed: int) -> np.ndarray | None:
    """(I, R) seconds after each rank's exit beyond the optimizer, drawn from
    ``post_ms``; 0 for the extra ranks, whose own steps hold their optimizer's time."""
    if not spec.post_ms and not spec.extra_steps:
        return None
    post = np.zeros(shape)
    if spec.post_ms:
        # a stream of its own: turning it on leaves every other draw unchanged
        post_rng = np.random.default_rng(np.random.SeedSequence([seed, 707]))
        post = resample(post_rng, np.asarray(spec.post_ms), shape) * 1e-3
    post[:, list(spec.extra_ranks)] = 0.0
    return post


def _whole_steps(
    spec: NoiseSpec, stall: np.ndarray, post: np.ndarray | None, seed: int
) -> np.ndarray | None:
    """Each extra rank's measured steps drawn whole, one per iteration: its extra time
    added to ``stall``, its optimizer beyond the workload's to ``post``, where its
    communication stood in the network's spread returned (``service_p``). A step's
    phases are kept together, not interpolated apart; the steps are dealt in shuffled
    rounds, each once per round, so that a few hundred iterations hold the measured
    steps at their measured weight (drawn with replacement, a one-in-ten stall came
    out 0.03 off in CV over 400 iterations)."""
    if not spec.extra_steps or post is None:
        return None
    # a stream of its own: turning it on leaves every other draw unchanged
    rng = np.random.default_rng(np.random.SeedSequence([seed, 909]))
    service_p = np.full(stall.shape, np.nan)
    for r, rows in zip(spec.extra_ranks, spec.step_tables(), strict=True):
        rounds = -(-stall.shape[0] // rows.shape[0])
        deal = np.concatenate([rng.permutation(rows.shape[0]) for _ in range(rounds)])
        pick = rows[deal[: stall.shape[0]]]
        stall[:, r] += pick[:, 0] * 1e-3
        post[:, r] = pick[:, 1] * 1e-3
        service_p[:, r] = np.where(pick[:, 2] >= 0, pick[:, 2], np.nan)
    return service_p


def _episodes(rng: np.random.Generator, iterations: int, nodes: int, rate: float, mean: float):
    """Boolean (I, N): episodes start with probability ``rate`` per node and iteration and
    last a geometric number of iterations of mean ``mean``."""
    out = np.zeros((iterations, nodes), dtype=bool)
    if rate <= 0:
        return out
    starts = np.argwhere(rng.random((iterations, nodes)) < rate)
    lengths = rng.geometric(1.0 / mean, len(starts))
    for (i, n), length in zip(starts, lengths, strict=True):
        out[i : i + length, n] = True
    return out
