"""Link counters a run directory may hold (``fabric-links.arrow``, written by the
emulated fabric): each link direction's utilisation over time, and the busiest ones
while the run ran — the "which link" of a contention finding, and the host whose
traffic crosses it.

One name per link direction everywhere (finding text, evidence, JSON, report, plots):
:attr:`LinkLoad.name`, ``uplink leaf1→spine`` or ``host link h3→leaf1`` — its kind
in words, then where the bytes go from and to.

Utilisation of a direction between two samples is Δbytes·8 / Δt / rate (see
docs/fabric.md); above 1 it is left out (null): no link carries more than its rate.
The counters' clock is the host's wall clock, as is the trace's (rank 0's clock, itself
aligned to wall time), so a run's time window selects its samples.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import polars as pl

from syncpace.trace.schema import LINKS_FILE


@dataclass(frozen=True)
class LinkLoad:
    """One link direction's load over a window: ``util`` is the mean utilisation
    (1 = its configured rate), ``peak`` the largest sample."""

    link: str
    kind: str
    src: str
    dst: str
    rate_bps: float
    util: float
    peak: float

    @property
    def direction(self) -> str:
        return f"{self.src}→{self.dst}"

    @property
    def name(self) -> str:
        """The link direction's one name: ``uplink leaf1→spine``, ``host link h3→leaf1``."""
        return link_name(self.kind, self.src, self.dst)


#: How a link's kind reads in its name.
KIND_WORDS = {"host": "host link"}


def link_name(kind: str, src: str, dst: str) -> str:
    return f"{KIND_WORDS.get(kind, kind)} {src}→{dst}"


def run_dirs(run: str) -> list[Path]:
    """The directories of a run's name: one, or the node directories of one job read
    together (named ``a + b``)."""
    return [Path(part) for part in str(run).split(" + ")]


def links_files(run_dir: str | Path) -> list[Path]:
    """The fabric's link counters files of a run directory, or of the node directories
    of one job read together (whichever hold one), in the order the run names them."""
    return [p for p in (d / LINKS_FILE for d in run_dirs(str(run_dir))) if p.is_file()]


def link_series(path: Path) -> pl.DataFrame:
    """Per sample interval and direction: time_ns, link, kind, src, dst, rate_bps, util."""
    links = pl.read_ipc_stream(path)
    if links.height == 0:
        return links.select("time_ns", "link", "kind", "src", "dst", "rate_bps").with_columns(
            util=pl.lit(0.0)
        )
    return (
        links.sort("time_ns")
        .with_columns(
            dt=pl.col("time_ns").diff().over("link", "src", "dst"),
            db=pl.col("bytes").diff().over("link", "src", "dst"),
        )
        .filter(pl.col("dt") > 0, pl.col("rate_bps") > 0, pl.col("db") >= 0)
        .with_columns(util=pl.col("db") * 8 / (pl.col("dt") / 1e9) / pl.col("rate_bps"))
        # above the link's rate is no measurement (samples read at uneven times): null,
        # so no figure shows it and no mean counts it
        .with_columns(util=pl.when(pl.col("util") <= 1.0).then(pl.col("util")))
        .select("time_ns", "link", "kind", "src", "dst", "rate_bps", "util")
    )


def busiest_links(
    run_dir: str | Path,
    window: tuple[int, int] | None = None,
    *,
    top: int | None = 3,
    min_util: float = 0.5,
) -> list[LinkLoad]:
    """The most loaded link directions in ``window`` (ns), busiest first: at most
    ``top`` of them, each at least ``min_util`` busy on average; shared links (uplinks)
    before host links. Empty when the run directory has no readable counters."""
    series = window_series(run_dir, window)
    if series is None or series.height == 0:
        return []
    per = (
        series.group_by("link", "kind", "src", "dst")
        .agg(
            rate_bps=pl.col("rate_bps").median(),
            util=pl.col("util").mean(),
            peak=pl.col("util").max(),
        )
        .filter(pl.col("util") >= min_util)
        .with_columns(host=pl.col("kind") == "host")
        .sort(["host", "util", "link", "src"], descending=[False, True, False, False])
        .head(top if top is not None else 1 << 30)
        .drop("host")
    )
    return [LinkLoad(**row) for row in per.iter_rows(named=True)]


def host_ends(links: Iterable[tuple[str, str, str]]) -> frozenset[str]:
    """The hosts among the fabric's links given as ``(kind, src, dst)``, each link in
    either direction or both: the ends of host links that end no other link. A host
    ends exactly one link; a switch ends a host link and at least one more (another
    host's, or an uplink: a leaf with one host below it ends one host link, like a
    host, and its uplink)."""
    pairs = {(kind, *sorted((a, b))) for kind, a, b in links}
    ends = Counter(end for _, a, b in pairs for end in (a, b))
    return frozenset(
        end for kind, a, b in pairs if kind == "host" for end in (a, b) if ends[end] == 1
    )


def host_link_rates(run_dir: str | Path, window: tuple[int, int] | None) -> dict[str, float]:
    """Each host's own link's rate (bit/s) over ``window``, as the counters record it:
    the fabric's setting, a fault's change included; of the slower direction, the median
    over the window. Empty without counters."""
    series = window_series(run_dir, window)
    if series is None or series.height == 0:
        return {}
    own = host_ends(series.select("kind", "src", "dst").unique().iter_rows())
    per_link = (
        series.filter(pl.col("kind") == "host")
        .group_by("link", "src", "dst")
        .agg(rate=pl.col("rate_bps").median())
    )
    rates: dict[str, float] = {}
    for _, src, dst, rate in per_link.iter_rows():
        host = src if src in own else dst
        rates[host] = min(rates.get(host, math.inf), float(rate))
    return dict(sorted(rates.items()))


def window_series(run_dir: str | Path, window: tuple[int, int] | None) -> pl.DataFrame | None:
    """:func:`link_series` of a run directory (or of the node directories of one job,
    the first that has one) within ``window``; ``None`` without a readable counters
    file."""
    paths = links_files(run_dir)
    if not paths:
        return None
    path = paths[0]
    try:
        series = link_series(path)
    except Exception:  # a damaged counters file is a missing picture, not a failure
        return None
    if window is not None:
        series = series.filter(pl.col("time_ns").is_between(window[0], window[1]))
    return series


def run_window(rank_steps: pl.DataFrame) -> tuple[int, int] | None:
    """First start to last end of a run's measured iterations (ns)."""
    if rank_steps.height == 0:
        return None
    return int(rank_steps["start_ns"].min()), int(rank_steps["end_ns"].max())  # type: ignore[arg-type]


def link_bytes(run_dir: str | Path, window: tuple[int, int]) -> pl.DataFrame | None:
    """Per link direction: the bytes it carried within ``window`` (ns) — each sampling
    interval's bytes, pro rata of its overlap with the window — with its ``kind``,
    ``src``, ``dst``, ``rate_bps`` and ``covered_ns`` (how much of the window its
    samples span). ``None`` without a readable counters file."""
    intervals = _intervals(run_dir)
    if intervals is None:
        return None
    t0, t1 = window
    inside = pl.min_horizontal("end_ns", pl.lit(t1)) - pl.max_horizontal("start_ns", pl.lit(t0))
    return (
        intervals.with_columns(inside=inside.clip(lower_bound=0))
        .group_by("link", "kind", "src", "dst")
        .agg(
            bytes=(
                pl.col("bytes") * pl.col("inside") / (pl.col("end_ns") - pl.col("start_ns"))
            ).sum(),
            rate_bps=pl.col("rate_bps").max(),
            covered_ns=pl.col("inside").sum(),
        )
        .sort("link", "src")
    )


def link_intervals(run_dir: str | Path, window: tuple[int, int]) -> pl.DataFrame | None:
    """Per link direction and sampling interval that overlaps ``window`` (ns): ``link``,
    ``kind``, ``src``, ``dst``, ``rate_bps``, the interval (``start_ns``, ``end_ns``)
    and the ``bytes`` it carried in it. ``None`` without a readable counters file."""
    intervals = _intervals(run_dir)
    if intervals is None:
        return None
    t0, t1 = window
    return intervals.filter(pl.col("end_ns") > t0, pl.col("start_ns") < t1)


def _intervals(run_dir: str | Path) -> pl.DataFrame | None:
    """Every sampling interval of every link direction in the run's counters file:
    ``link``, ``kind``, ``src``, ``dst``, ``rate_bps``, ``start_ns``, ``end_ns`` and the
    ``bytes`` counted in it (intervals whose counter went back, a reset, left out).
    ``None`` without a readable file."""
    paths = links_files(run_dir)
    if not paths:
        return None
    try:
        raw = pl.read_ipc_stream(paths[0])
    except Exception:  # a damaged counters file is a missing picture, not a failure
        return None
    return (
        raw.sort("time_ns")
        .with_columns(
            start_ns=pl.col("time_ns").shift(1).over("link", "src", "dst"),
            bytes=pl.col("bytes").diff().over("link", "src", "dst"),
        )
        .filter(pl.col("time_ns") > pl.col("start_ns"), pl.col("bytes") >= 0)
        .select(
            "link",
            "kind",
            "src",
            "dst",
            "rate_bps",
            "start_ns",
            pl.col("time_ns").alias("end_ns"),
            pl.col("bytes").cast(pl.Float64),
        )
    )


@dataclass(frozen=True)
class Paths:
    """The emulated fabric as its counters declare it: each link direction (from, to)
    with its kind and its largest rate over the run (bit/s: a fault's slower setting
    is not the link's capacity), and the one path between two hosts (a tree: a star or
    a leaf-spine with one spine)."""

    rates: dict[tuple[str, str], float]
    kinds: dict[tuple[str, str], str]

    @cached_property
    def _next(self) -> dict[str, list[str]]:
        """Where each node's links lead: built once, every ring edge walks it."""
        out: dict[str, list[str]] = {}
        for src, dst in self.rates:
            out.setdefault(src, []).append(dst)
        return out

    def path(self, a: str, b: str) -> list[tuple[str, str]] | None:
        """The link directions from host ``a`` to host ``b``, fewest hops first found;
        ``None`` where either is not on the fabric or nothing joins them."""
        nxt = self._next
        if a not in nxt:
            return None
        back: dict[str, str] = {a: a}
        frontier = [a]
        while frontier and b not in back:
            step = []
            for node in frontier:
                for n in nxt.get(node, []):
                    if n not in back:
                        back[n] = node
                        step.append(n)
            frontier = step
        if b not in back:
            return None
        hops = []
        node = b
        while node != a:
            hops.append((back[node], node))
            node = back[node]
        return hops[::-1]


def fabric_paths(run_dir: str | Path) -> Paths | None:
    """The fabric's link directions of a run directory's counters (the first file of
    :func:`links_files`); ``None`` without a readable one."""
    paths = links_files(run_dir)
    if not paths:
        return None
    try:
        links = pl.read_ipc_stream(paths[0], columns=["src", "dst", "kind", "rate_bps"])
        per = links.group_by("src", "dst").agg(pl.col("kind").first(), pl.col("rate_bps").max())
    except Exception:  # a damaged counters file is no fabric, never a failed analysis
        return None
    rates, kinds = {}, {}
    for src, dst, kind, rate in per.iter_rows():
        if rate is not None and rate > 0:
            rates[(str(src), str(dst))] = float(rate)
            kinds[(str(src), str(dst))] = str(kind)
    return Paths(rates, kinds) if rates else None
