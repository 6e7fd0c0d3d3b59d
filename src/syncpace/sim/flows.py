"""Flow-level fluid model: max-min fair sharing by progressive filling.

Entities are coflows: a set of flows that advance together (one flow is a coflow of
one). Entity ``e`` at rate ``r_e`` (bytes/s of its largest flow) loads link ``l`` with
``w[l, e] * r_e``, where ``w[l, e]`` sums the bytes of its flows on ``l`` over its
largest flow's bytes. Progressive filling raises every unfrozen rate together until a
link fills, freezes the entities crossing it, and repeats: the result is max-min fair
(weighted by ``w``). The incidence is kept sparse as (link, entity, weight) triplets.

:class:`FluidNetwork` is event driven: rates are re-solved only when an entity starts
or finishes; between events every entity moves at constant rate.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

_EPS = 1e-9


def max_min_rates(
    link: np.ndarray, entity: np.ndarray, weight: np.ndarray, capacity: np.ndarray, n: int
) -> np.ndarray:
    """Max-min fair rates of ``n`` entities given sparse incidence triplets."""
    rates = np.zeros(n)
    if n == 0:
        return rates
    remaining = capacity.astype(float).copy()
    frozen = np.ones(n, dtype=bool)
    frozen[np.unique(entity)] = False  # an entity on no link has no limit: left at 0
    saturated = np.zeros(capacity.size, dtype=bool)
    while not frozen.all():
        active = ~frozen[entity]
        load = np.bincount(link[active], weights=weight[active], minlength=capacity.size)
        used = load > 0
        headroom = np.full(capacity.size, np.inf)
        headroom[used] = remaining[used] / load[used]
        delta = max(float(headroom.min()), 0.0)
        rates[~frozen] += delta
        remaining[used] -= delta * load[used]
        newly = used & (remaining <= _EPS * capacity)
        saturated |= newly
        hit = np.unique(entity[saturated[link] & active])
        if hit.size == 0:  # numerical safety: freeze the tightest link's entities
            hit = np.unique(entity[active & (link == int(np.argmin(headroom)))])
        frozen[hit] = True
    return rates


def link_loads(
    link: np.ndarray, entity: np.ndarray, weight: np.ndarray, rates: np.ndarray, n_links: int
) -> np.ndarray:
    return np.bincount(link, weights=weight * rates[entity], minlength=n_links)


def incidence(routes: np.ndarray, nbytes: np.ndarray, coflow: np.ndarray) -> tuple:
    """Triplets (link, entity, weight) of coflows from per-flow routes (F, hops)."""
    hops = routes.shape[1]
    biggest = np.zeros(int(coflow.max()) + 1 if coflow.size else 0)
    np.maximum.at(biggest, coflow, nbytes)
    lk = routes.reshape(-1)
    ent = np.repeat(coflow, hops)
    w = np.repeat(nbytes / biggest[coflow], hops)
    keep = lk >= 0
    lk, ent, w = lk[keep], ent[keep], w[keep]
    # merge duplicates (several flows of one coflow on one link)
    key = ent * (int(lk.max()) + 1 if lk.size else 1) + lk
    uniq, inv = np.unique(key, return_inverse=True)
    wsum = np.bincount(inv, weights=w)
    first = np.zeros(uniq.size, dtype=np.int64)
    first[inv] = np.arange(inv.size)
    return lk[first], ent[first], wsum, biggest


@dataclass
class _Entity:
    links: np.ndarray
    weights: np.ndarray
    remaining: float  # bytes of its largest flow still to send
    tag: object


@dataclass
class FluidNetwork:
    """Event-driven fluid simulation over a fixed set of links."""

    capacity: np.ndarray
    now: float = 0.0
    entities: dict[int, _Entity] = field(default_factory=dict)
    _next_id: int = 0
    _pending: list = field(default_factory=list)  # heap of (start time, id, entity)
    solves: int = 0

    def add(self, start: float, links, weights, nbytes: float, tag: object = None) -> int:
        """Schedule an entity that starts at ``start`` (>= now). ``nbytes`` may be
        ``inf``: the entity then takes its share until the end and never finishes."""
        eid = self._next_id
        self._next_id += 1
        links = np.asarray(links, dtype=np.int64)
        # an entity that crosses no link (a rank to itself) finishes at once
        ent = _Entity(links, np.asarray(weights, float), nbytes if links.size else 0.0, tag)
        heapq.heappush(self._pending, (max(start, self.now), eid, ent))
        return eid

    def _rates(self) -> tuple[list[int], np.ndarray]:
        ids = list(self.entities)
        if not ids:
            return ids, np.zeros(0)
        lk = np.concatenate([self.entities[i].links for i in ids])
        w = np.concatenate([self.entities[i].weights for i in ids])
        ent = np.repeat(np.arange(len(ids)), [self.entities[i].links.size for i in ids])
        self.solves += 1
        return ids, max_min_rates(lk, ent, w, self.capacity, len(ids))

    def run_until(self, done: set[int] | None = None, until: float = np.inf) -> dict[int, float]:
        """Advance until every id in ``done`` has finished (or ``until``); returns the
        finish time of each entity that finished meanwhile."""
        finished: dict[int, float] = {}
        waiting = set(done or ())
        while True:
            if done is not None and not (waiting - set(finished)):
                return finished
            next_start = self._pending[0][0] if self._pending else np.inf
            ids, rates = self._rates()
            t_end = np.inf
            if ids:
                rem = np.array([self.entities[i].remaining for i in ids])
                with np.errstate(divide="ignore"):
                    times = np.where(rates > 0, rem / np.where(rates > 0, rates, 1), np.inf)
                t_end = self.now + float(times.min())
            t_next = min(next_start, t_end, until)
            if not np.isfinite(t_next):
                return finished
            dt = t_next - self.now
            for i, r in zip(ids, rates, strict=True):
                self.entities[i].remaining -= r * dt
            self.now = t_next
            for i in ids:
                if self.entities[i].remaining <= 1e-3:  # bytes: float residue of a finish
                    finished[i] = self.now
                    del self.entities[i]
            while self._pending and self._pending[0][0] <= self.now:
                _, eid, ent = heapq.heappop(self._pending)
                if ent.remaining <= 0:  # crosses no link: done on arrival
                    finished[eid] = self.now
                else:
                    self.entities[eid] = ent
            if self.now >= until:
                return finished
