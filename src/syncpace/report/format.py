"""Numbers and names as people read them: one formatter for every human output.

The terminal summary, the HTML report and any later output call these functions, so a
value reads the same everywhere: durations in ns/µs/ms/s and bandwidths in
Mbit/s, Gbit/s or GB/s chosen by magnitude, shares as percentages, ranks with their host
and local rank, no raw dicts, lists or nulls. ``--json`` keeps the raw numbers.

Evidence keys follow a naming convention the detectors keep (``lateness_p50_ms``,
``cross_node_busbw_gbps_p50``, ``wait_share_of_iteration``): the unit is a token of the
key, so evidence added later reads right without a change here; :data:`LABELS` only
gives some keys a better name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import polars as pl

from syncpace.analysis import modes
from syncpace.analysis.timebase import TimeBase
from syncpace.analysis.wholerun import DetectionSpan, WholeRun
from syncpace.trace.validate.completeness import ranges

#: Better names for some evidence keys; the unit still comes from the key's tokens.
LABELS = {
    "late_ranks": "late ranks",
    "whole_nodes": "hosts late with all their ranks",
    "lateness_p50_ms": "median lateness",
    "typical_lateness_p50_ms": "typical rank's median lateness",
    "last_share": "iterations it arrived last",
    "wait_share_of_iteration": "others' wait, share of the iteration",
    "iteration_ms": "iteration time",
    "other_local_ranks_lateness_p50_ms": "other local ranks' median lateness",
    "late_side": "late CPU or slow GPU",
    "device_late_p50_ms": "device arrival late by (median, against the typical rank)",
    "host_late_p50_ms": "host enqueue late by (median, against the typical rank)",
    "run_ahead_p50_ms": "CPU run-ahead of its device (median)",
    "typical_run_ahead_p50_ms": "typical rank's CPU run-ahead (median)",
    "iteration_cv": "iteration-time variation (CV: standard deviation ÷ mean)",
    "ranks_ever_last": "ranks ever last",
    "max_last_share": "most iterations one rank was last",
    "skew_p50_ms": "median arrival skew",
    "median_inflation": "median transfer slowdown (× the best seen)",
    "p90_inflation": "p90 transfer slowdown (× the best seen)",
    "inflated_share": "collectives slowed down",
    "skew_transfer_correlation": "arrival skew vs transfer time (correlation)",
    "own_lateness_transfer_correlation": "late rank's own lateness vs transfer (correlation)",
    "excess_transfer_ms_per_iteration": "excess transfer time per iteration",
    "cross_node_busbw_gbps_p50": "cross-node busbw (median)",
    "intra_node_busbw_gbps_p50": "intra-node busbw (median)",
    "intra_node_median_inflation": "intra-node median transfer slowdown (× the best seen)",
    "groups": "process groups",
    "small_per_iteration": "small collectives per iteration and rank",
    "small_bytes_p50": "median small message",
    "small_service_us_p50": "median small-collective time",
    "latency_us": "latency a bucket pays once (the smallest calls' median time)",
    "bytes_at": "bytes timed at",
    "share_of_iteration": "share of the iteration",
    "knee_bytes_threshold": "latency knee (threshold)",
    "estimated_knee_bytes": "latency knee (estimated α·B)",
    "busbw_gbps_p50": "busbw (median)",
    "reference_busbw_gbps": "reference busbw",
    "bytes_p50": "median message",
    "exposed_share": "communication not hidden by compute (exposed), share of the iteration",
    "network_share": "network busy, share of the iteration",
    "overlap_ratio": "communication overlapped with compute",
    "exposed_ms_per_iteration": "communication not hidden by compute (exposed) per iteration",
    "missing_ranks": "ranks without a trace",
    "incomplete_instances": "collectives lacking some ranks",
    "incomplete_share": "share of collectives incomplete",
    "size_mismatched_instances": "collectives whose size differs across ranks",
    "reader_warnings": "reader warnings",
    "clock_uncertainty_ns": "clock uncertainty (largest)",
    "median_skew_ns": "median arrival skew",
    "cv_by_world_size": "iteration-time variation (CV) by world size",
    "cv_grows_with_scale": "iteration-time variation (CV) grows with scale",
    "busbw_assumes": "busbw assumes",
    "threshold": "threshold",
}

#: Keys whose unit their name does not carry.
KINDS = {"threshold": "percent"}

_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_SHARE_TOKENS = {"share", "fraction", "ratio"}
_RANK_KEYS = {"ranks", "rank", "late_ranks", "missing_ranks"}
_LIST_MAX = 6


# --------------------------------------------------------------------------- numbers


def number(x: float, digits: int = 3) -> str:
    """``x`` with about ``digits`` significant digits, thousands separated."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if x == 0:
        return "0"
    mag = abs(x)
    if mag >= 1e15:
        return f"{x:.{digits}g}"
    if mag >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    decimals = digits - 1 - int(math.floor(math.log10(mag)))
    text = f"{x:,.{min(decimals, 6)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def count(n: float) -> str:
    return f"{int(round(n)):,}"


def percent(fraction: float) -> str:
    """0.7702 -> '77%', 0.0233 -> '2.3%', 0.0004 -> '0.04%'."""
    if fraction is None or not math.isfinite(fraction):
        return "—"
    p = fraction * 100
    if p == 0:
        return "0%"
    if not math.isfinite(p):
        return "—"
    if abs(p) >= 1e6:
        return f"{p:.3g}%"
    if abs(p) >= 10:
        return f"{p:.0f}%"
    if abs(p) >= 1:
        return f"{p:.1f}%"
    return f"{p:.2g}%"


def variation(cv: float) -> str:
    """How much iteration times vary around their mean: 0.216 -> '±22% (CV)'."""
    return f"±{percent(cv)} (CV)"


def signed_percent(change: float) -> str:
    """A relative change: -0.022 -> '−2.2%', 0.31 -> '+31%'."""
    text = percent(abs(change))
    return ("−" if change < 0 else "+") + text if change else "±0%"


def duration(seconds: float) -> str:
    """A time in the unit that keeps it readable: '57 µs', '138 ms', '1.25 s'."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    mag = abs(seconds)
    if mag == 0:
        return "0 ms"
    if mag < 1e-6:
        return f"{number(seconds * 1e9)} ns"
    if mag < 1e-3:
        return f"{number(seconds * 1e6)} µs"
    if mag < 1:
        return f"{number(seconds * 1e3)} ms"
    return f"{number(seconds)} s"


def duration_ns(ns: float) -> str:
    return duration(ns / 1e9)


def duration_ms(ms: float) -> str:
    return duration(ms / 1e3)


#: (threshold in bit/s, unit, divisor in bit/s): the first whose threshold is above
#: the value. Links are rated in bits (100 Mbit/s Ethernet, 400 Gbit/s InfiniBand);
#: beyond 400 Gbit/s (NVLink, PCIe) people speak of bytes.
_BANDWIDTH_UNITS = (
    (1e6, "kbit/s", 1e3),
    (1e9, "Mbit/s", 1e6),
    (400e9, "Gbit/s", 1e9),
    (math.inf, "GB/s", 8e9),
)


def bandwidth_unit(gbytes_per_s: float) -> tuple[str, float]:
    """(unit, factor): the unit for a bandwidth of this size, and what GB/s is
    multiplied by to be in it."""
    bits = abs(gbytes_per_s) * 8e9
    unit, divisor = next(
        ((u, d) for limit, u, d in _BANDWIDTH_UNITS if bits < limit), ("GB/s", 8e9)
    )
    return unit, 8e9 / divisor


def bandwidth(gbytes_per_s: float) -> str:
    """A bandwidth given in GB/s (bytes/ns), as people quote it: 0.003 -> '24 Mbit/s'."""
    if gbytes_per_s is None or not math.isfinite(gbytes_per_s):
        return "—"
    if gbytes_per_s == 0:
        return "0 Gbit/s"
    unit, factor = bandwidth_unit(gbytes_per_s)
    return f"{number(gbytes_per_s * factor)} {unit}"


def size(nbytes: float) -> str:
    """Bytes in binary units: 1071144 -> '1.02 MiB'."""
    if nbytes is None or not math.isfinite(nbytes):
        return "—"
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{count(value)} B" if unit == "B" else f"{number(value)} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def times(ratio: float) -> str:
    return f"{number(ratio)}×"


def confidence(c: float) -> str:
    """'high (0.91)': how sure a finding is, in a word and the number."""
    word = "high" if c >= 0.8 else "medium" if c >= 0.5 else "low"
    return f"{word} ({c:.2f})"


def mode_title(mode: str) -> str:
    """What to call ``mode`` in a sentence or a heading: its title in the registry
    (:mod:`syncpace.analysis.modes`); a name no mode has reads with spaces."""
    if modes.is_registered(mode):
        return modes.get(mode).title
    return mode.replace("_", " ").capitalize()


# --------------------------------------------------------------------------- places


@dataclass(frozen=True)
class Places:
    """Where each rank ran: host and local rank (from the run's placement frame)."""

    host: Mapping[int, str]
    local: Mapping[int, int]

    @classmethod
    def of(cls, placement: pl.DataFrame | None) -> Places:
        if placement is None or placement.height == 0:
            return cls({}, {})
        ranks = placement["rank"].to_list()
        return cls(
            dict(zip(ranks, placement["node"].to_list(), strict=True)),
            dict(zip(ranks, placement["local_rank"].to_list(), strict=True)),
        )

    def rank(self, r: int) -> str:
        """'rank 2 (h2, local rank 0)'."""
        if r not in self.host:
            return f"rank {r}"
        return f"rank {r} ({self.host[r]}, local rank {self.local[r]})"

    def short(self, r: int) -> str:
        """'2 (h2)': a rank inside a list."""
        return f"{r} ({self.host[r]})" if r in self.host else str(r)

    def ranks(self, ranks: Sequence[int]) -> str:
        """Ranks with where they ran, shortest readable form.

        One rank: 'rank 2 (h2, local rank 0)'; a host's every rank: 'all 4 ranks of h2';
        a few: 'ranks 2 (h0, local rank 2), 6 (h1, local rank 2)'; many: their ranges and
        hosts.
        """
        ranks = sorted({int(r) for r in ranks})
        if not ranks:
            return "no rank"
        if len(ranks) == 1:
            return self.rank(ranks[0])
        hosts = sorted({self.host[r] for r in ranks if r in self.host})
        whole = [h for h in hosts if set(self.ranks_of(h)) == set(ranks)]
        if len(hosts) == 1 and whole:
            return f"all {len(ranks)} ranks of {hosts[0]}"
        if len(ranks) <= 4:
            return "ranks " + ", ".join(
                f"{r} ({self.host[r]}, local rank {self.local[r]})" if r in self.host else str(r)
                for r in ranks
            )
        where = f" on {names(hosts)}" if hosts else ""
        return f"{len(ranks)} ranks {rank_ranges(ranks)}{where}"

    def ranks_of(self, host: str) -> list[int]:
        return sorted(r for r, h in self.host.items() if h == host)


def where(ranks: Sequence[int], nodes: Sequence[str], places: Places) -> str:
    """Who a finding names: its ranks (with host and local rank), else its hosts."""
    if ranks:
        return places.ranks(ranks)
    if nodes:
        return ("host " if len(nodes) == 1 else "hosts ") + names(list(nodes))
    return "all ranks"


def rank_ranges(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '0–2, 5'."""
    return ranges(sorted(set(ranks)), dash="–")


def names(items: Sequence[Any], limit: int = _LIST_MAX) -> str:
    """'h0, h1, h2' or 'h0, h1, … (12 in all)'."""
    items = [str(i) for i in items]
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[: limit - 1]) + f", … ({len(items)} in all)"


def run_names(runs: Sequence[str]) -> dict[str, str]:
    """Short distinct names for run directories: their shortest distinct path tails."""
    parts = {r: PurePath(r).parts or (r,) for r in runs}
    for depth in range(1, max((len(p) for p in parts.values()), default=1) + 1):
        tails = {r: "/".join(p[-depth:]) for r, p in parts.items()}
        if len(set(tails.values())) == len(set(runs)):
            return tails
    return {r: r for r in runs}


# --------------------------------------------------------------------------- evidence


def _kind(key: str) -> str:
    if key in KINDS:
        return KINDS[key]
    tokens = key.lower().split("_")
    if key in _RANK_KEYS or tokens[-1] == "ranks" and "ever" not in tokens:
        return "ranks"
    if "gbps" in tokens:
        return "bandwidth"
    for token in ("ns", "us", "ms"):
        if token in tokens:
            return token
    if tokens[-1] == "s" and len(tokens) > 1:
        return "s"
    if "bytes" in tokens:
        return "bytes"
    if "inflation" in tokens:
        return "times"
    if "correlation" in tokens:
        return "correlation"
    if _SHARE_TOKENS & set(tokens):
        return "percent"
    if "cv" in tokens:
        return "cv"
    return "plain"


def label(key: str) -> str:
    """A readable name for an evidence key."""
    if key in LABELS:
        return LABELS[key]
    tokens = [t for t in key.split("_") if t not in ("ns", "us", "ms", "gbps")]
    if "p50" in tokens:
        tokens = ["median", *[t for t in tokens if t != "p50"]]
    return " ".join(tokens) or key


def value(key: str, v: Any, places: Places | None = None) -> str | None:
    """``v`` (an evidence value named ``key``) as text; ``None`` when there is none."""
    places = places or Places({}, {})
    kind = _kind(key)
    if v is None:
        return None
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, Mapping):
        return _mapping(key, kind, v, places)
    if isinstance(v, (list, tuple)):
        if not v:
            return "none"
        if kind == "ranks" and all(_is_int(x) for x in v):
            return places.ranks([int(x) for x in v])
        items = [value(key, x, places) or "—" for x in v]
        if key.endswith("warnings") or any(len(i) > 40 for i in items):
            return "; ".join(items[:2]) + (f"; … ({len(items)} in all)" if len(items) > 2 else "")
        return names(items)
    if isinstance(v, str):
        return v if v.strip() else None
    if isinstance(v, (int, float)):
        if kind == "ranks" and _is_int(v):
            return places.rank(int(v))
        return _scalar(kind, v)
    return str(v)


def _mapping(key: str, kind: str, v: Mapping[Any, Any], places: Places) -> str:
    by_world = "world_size" in key
    parts = []
    for k, x in v.items():
        if by_world and _is_int(k):
            name = f"{int(k)} ranks"
        elif _is_int(k) and int(k) in places.host:
            name = places.rank(int(k))
        elif _is_int(k):
            name = f"rank {int(k)}"
        else:
            name = str(k)
        text = value(key, x, places) if not isinstance(x, (int, float)) else _scalar(kind, x)
        parts.append(f"{name}: {text if text is not None else '—'}")
    if len(parts) > _LIST_MAX:
        return "; ".join(parts[: _LIST_MAX - 1]) + f"; … ({len(parts)} in all)"
    return "; ".join(parts) or "none"


def _is_int(x: Any) -> bool:
    """An integer, or a string of one (JSON turns rank keys into strings)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return True
    return isinstance(x, str) and x.strip().lstrip("-").isdigit()


def _scalar(kind: str, x: float) -> str:
    if isinstance(x, float) and not math.isfinite(x):
        return "—"
    if kind in _TIME_UNITS:
        return duration(x * _TIME_UNITS[kind])
    if kind == "bandwidth":
        return bandwidth(x)
    if kind == "bytes":
        return size(x)
    if kind == "percent":
        return percent(x)
    if kind == "times":
        return times(x)
    if kind == "correlation":
        return f"{x:+.2f}"
    if kind == "cv":
        return number(x)
    if isinstance(x, int) or float(x).is_integer():
        return count(x)
    return number(x)


def evidence_rows(
    evidence: Mapping[str, Any], places: Places | None = None
) -> list[tuple[str, str]]:
    """(label, text) of every evidence item that has a value, in the finding's order."""
    rows = []
    for key, v in evidence.items():
        text = value(key, v, places)
        if text is not None:
            rows.append((label(key), text))
    return rows


# --------------------------------------------------------------------------- trailing work


def trailing_line(t: dict) -> str:
    """One line on the calls after the last iteration boundary (kept out of the figures)."""
    if not t:
        return "none"
    ops = ", ".join(f"{op} ×{n}" for op, n in list(t.get("ops", {}).items())[:4])
    return (
        f"{number(t.get('calls_per_rank', 0))} calls per rank ({ops}) over "
        f"{duration_ns(t.get('span_ns', 0))}, not counted in the iteration figures"
    )


def other_kind_line(k: dict) -> str:
    """One line on iterations of another kind (evaluation, checkpoint): which steps,
    their calls against a training iteration's, their time and share of the run."""
    steps = k.get("steps", [])
    every = k.get("every")
    shown = ", ".join(map(str, steps[:6])) + (", …" if len(steps) > 6 else "")
    where = f"every {every} steps ({shown})" if every else f"steps {shown}"
    calls = ", ".join(f"{op} ×{c['calls']}" for op, c in list(k.get("calls", {}).items())[:4])
    return (
        f"{k.get('count', 0)} iterations of another kind, {where}: "
        f"{k.get('calls_per_step', 0)} calls ({calls}) instead of "
        f"{k.get('training_calls_per_step', 0)}, {duration_ns(k.get('time_mean_ns', 0))} "
        f"instead of {duration_ns(k.get('training_time_mean_ns', 0))}, "
        f"{percent(k.get('share_of_run', 0))} of the run; measured apart, not as jitter"
    )


def other_kinds_text(kinds: list[dict]) -> str:
    """Every other kind of iteration of a run, one line each; "none" without any."""
    return "; ".join(other_kind_line(k) for k in kinds) if kinds else "none"


# --------------------------------------------------------------------------- clock


def time_base_line(base: TimeBase, per_rank: pl.DataFrame, places: Places | None = None) -> str:
    """Which clock a run's figures are on and, on the device's, each rank's CPU
    run-ahead: 'device (CUDA events, ±12 µs); CPU ahead of the device (median): …'."""
    line = base.label()
    if base.note():
        line += f" ({base.note()})"
    if base.device and "run_ahead_p50_ns" in per_rank.columns:
        ahead = {
            int(r): v / 1e6
            for r, v in zip(per_rank["rank"], per_rank["run_ahead_p50_ns"], strict=True)
            if v is not None
        }
        line += "; CPU ahead of the device (median): " + (
            value("run_ahead_p50_ms", ahead, places) or "—"
        )
    return line


# --------------------------------------------------------------------------- pacing


def pacing_line(p: dict) -> str:
    """One line on what the pacer did and whether the A/B guard found it helps."""
    stopped = f"; stopped: {p['errors'][0]}" if p.get("errors") else ""
    return (
        f"pacing ({p.get('policy')}): {percent(p.get('fraction_paced', 0) or 0)} of steps "
        f"paced, max delay {duration(p.get('delay_max_s', 0) or 0)} (bound "
        f"{duration(p.get('bound_s', 0) or 0)}); {ab_words(p)}{stopped}"
    )


def ab_words(p: dict) -> str:
    """The A/B guard's verdict with the figures it rests on, in words that cannot read
    as a contradiction: a positive gain it did not trust is said to be untrusted."""
    state = p.get("ab_state")
    confidence, gain, needed = (
        p.get("ab_confidence"),
        p.get("ab_throughput_gain"),
        p.get("ab_required"),
    )
    fixed = {
        "not_needed": "A/B never needed: arrival skew stayed below the pacing threshold",
        "probing": "A/B still probing: too few paced and unpaced windows to decide",
        None: "no A/B guard",
    }
    if state in fixed:
        return fixed[state]
    if confidence is None or gain is None:
        return {
            "helps": "A/B kept on: paced steps were faster",
            "no_help": "A/B turned off: no benefit shown",
        }.get(state, f"A/B {state}")
    sure = f"{confidence:.0%} sure it is not chance" + (f", {needed:.0%} needed" if needed else "")
    change = f"throughput {signed_percent(gain)} paced against unpaced"
    if state == "helps":
        return f"A/B kept on: {change} ({sure})"
    if state == "no_help" and gain > 0:
        return f"A/B turned off: {change}, but too uncertain to keep ({sure})"
    if state == "no_help":
        return f"A/B turned off: pacing did not help ({change})"
    return f"A/B {state}: {change} ({sure})"


# Whole run (always-on mode) ------------------------------------------------------------
#: Detections named in the one-line view of the whole run; the rest are counted.
LINE_DETECTIONS = 3


def step_spans(spans: Sequence[Sequence[int]], limit: int = 6) -> str:
    """[(0, 3), (45, 70)] -> '0–3, 45–70' (the first ``limit``, then how many more)."""
    parts = [f"{a}–{b}" if a != b else f"{a}" for a, b in spans[:limit]]
    if len(spans) > limit:
        parts.append(f"{len(spans) - limit} more")
    return ", ".join(parts) if parts else "none"


def detection_title(kind: str, rank: int | None, places: Places) -> str:
    """'straggler: rank 1 (h0, local rank 1)', 'iteration time up'."""
    if kind == "straggler":
        return "straggler: " + (places.rank(rank) if rank is not None else "a rank")
    if kind == "step_time_jump":
        return "iteration time up"
    return kind


def detection_when(span: DetectionSpan) -> str:
    """'from step 41 (detected at 50) to step 96' — the end as the stop's detection."""
    text = f"from step {span.start_step}"
    if span.detected_step is not None and span.detected_step != span.start_step:
        text += f" (detected at {span.detected_step})"
    text += f", over at step {span.stop_step}" if span.stop_step is not None else ", still on"
    cost = span.episode_cost
    if cost:
        text += f", costing {percent(cost)}"
    return text


def whole_run_line(w: WholeRun, places: Places) -> str:
    """The terminal's one line on the whole run of an always-on job."""
    text = (
        f"whole run: {count(w.summarised)} steps summarised (steps {w.first_step}–{w.last_step}, "
        f"{w.ranks} ranks), {count(w.full_detail_steps)} with full detail "
        f"({step_spans(w.full_detail)})"
    )
    shown = [
        f"{detection_title(d.kind, d.rank, places)} {detection_when(d)}"
        for d in w.detections[:LINE_DETECTIONS]
    ]
    if len(w.detections) > LINE_DETECTIONS:
        shown.append(f"{len(w.detections) - LINE_DETECTIONS} more")
    return text + "; detections: " + ("; ".join(shown) if shown else "none")
