"""The verdict: what is wrong, where, how sure, what to do first — and whether the data
can be trusted. Every human output opens with it.

The causes named are the one or two that cost most, by each finding's ``cost`` (over
runs, the largest): symptoms, data-quality notes and causes below a warning are left
out. Any other cause worth a warning is listed after them in one line each. "Where"
names ranks with their host and local rank, hosts, and — when the run directory holds
link counters — the busiest links while the run ran.
"""

from __future__ import annotations

from dataclasses import dataclass

from syncpace.analysis import Analysis, Finding, Role, RunMetrics, Severity, modes
from syncpace.analysis.costs import across_runs
from syncpace.report import format as fmt
from syncpace.report.links import LinkLoad, busiest_links, run_window
from syncpace.report.merge import MergedFinding, merge_findings

#: How many causes the verdict names before "also".
HEADLINE_CAUSES = 2


@dataclass(frozen=True)
class Cause:
    """One cause as the verdict states it: each field is text for people."""

    mode: str
    title: str
    cost: str
    where: str
    sure: str
    summary: str
    action: str
    severity: Severity
    links: tuple[LinkLoad, ...] = ()


@dataclass(frozen=True)
class Verdict:
    headline: str  # "2 causes cost most"
    timing: tuple[str, ...]  # per run: iteration time and its change against the baseline
    causes: tuple[Cause, ...]
    also: tuple[Cause, ...]
    quality: tuple[str, ...]  # data-quality warnings: loss, clocks, incomplete runs
    trust: str  # what the data is, when nothing is wrong with it
    first_action: str
    #: what the costs are and how they combine: per run, then across runs
    costs: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.causes


def build_verdict(analysis: Analysis, merged: list[MergedFinding] | None = None) -> Verdict:
    merged = merged if merged is not None else merge_findings(analysis)
    names = fmt.run_names([r.run for r in analysis.runs])
    runs = {r.run: r for r in analysis.runs}
    causes = sorted(
        (m for m in merged if m.is_cause and m.severity >= Severity.WARNING),
        key=lambda m: -m.cost,
    )
    stated = [_cause(m, runs, names) for m in causes]
    top, also = stated[:HEADLINE_CAUSES], stated[HEADLINE_CAUSES:]
    quality = quality_warnings(analysis, merged, names)
    return Verdict(
        headline=_headline(top, bool(quality)),
        timing=tuple(timing(analysis, names)),
        causes=tuple(top),
        also=tuple(also),
        quality=tuple(quality),
        trust=_trust(analysis),
        first_action=top[0].action if top else "Nothing to fix; re-check at larger scale.",
        costs=tuple(cost_lines(analysis, names)) if top else (),
    )


def cost_lines(analysis: Analysis, names: dict[str, str]) -> list[str]:
    """Each run's causes alone and together, in words, then why one cause's cost
    differs between runs (:mod:`syncpace.analysis.costs`)."""
    multi = len(analysis.runs) > 1
    out = []
    for account in analysis.costs:
        text = account.text(symptoms=False) if account is not None else ""
        if account is not None and text:
            out.append((f"{names.get(account.run, account.run)}: " if multi else "") + text)
    paced = [r.pacing is not None for r in analysis.runs]
    return out + across_runs(analysis.costs, paced, names)


def cost_text(f: Finding) -> str:
    """A finding's cost as the report's cost line reads: what removing it alone saves;
    a symptom's said not to add to its causes'."""
    text = f"{fmt.percent(f.cost)} of each iteration"
    if f.cost_basis == "replay":
        text += " saved by removing it alone (replayed)"
    if f.symptom or modes.has_role(f.mode, Role.SYMPTOM):
        text += "; a symptom of the causes, not added to them"
    return text


def _headline(top: list[Cause], doubtful: bool) -> str:
    if not top:
        # an incomplete or untrustworthy trace is never called healthy
        return (
            "No cause found in what was traced — see the data quality"
            if doubtful
            else ("No scaling problem found")
        )
    return "One cause costs most" if len(top) == 1 else f"{len(top)} causes cost most"


def timing(analysis: Analysis, names: dict[str, str]) -> list[str]:
    """Per run: iteration time, its tail and spread, and its change against the baseline."""
    changes = {c.run: c for c in analysis.comparison}
    out = []
    for r in analysis.runs:
        it = r.iteration
        text = (
            f"{fmt.duration_ns(r.iteration_ns)} per iteration (p99 "
            f"{fmt.duration_ns(it.get('p99', 0))}, varies {fmt.variation(it.get('cv', 0))})"
        )
        c = changes.get(r.run)
        if c is not None and c.iteration_change is not None and c.baseline is not None:
            text += f", {fmt.signed_percent(c.iteration_change)} against {names[c.baseline]}"
        if r.pacing is not None:
            text += f", paced in {fmt.percent(r.pacing.get('fraction_paced') or 0)} of steps"
        out.append(f"{names[r.run]}: {text}" if len(analysis.runs) > 1 else text)
    return out


def _cause(m: MergedFinding, runs: dict[str, RunMetrics], names: dict[str, str]) -> Cause:
    first = m.first
    run = runs.get(first.run)
    places = fmt.Places.of(run.placement if run is not None else None)
    links = tuple(_links(m, runs)) if m.mode == "fabric_contention" else ()
    return Cause(
        mode=m.mode,
        title=fmt.mode_title(m.mode),
        cost=_costs(m, names),
        where=where(m, places, links),
        sure=fmt.confidence(m.confidence),
        summary=first.summary,
        action=first.actions[0] if first.actions else "",
        severity=m.severity,
        links=links,
    )


def _costs(m: MergedFinding, names: dict[str, str]) -> str:
    """'51% of each iteration'; over runs '51% (trace), 50% (trace-paced) of each
    iteration', naming only the runs that show it when it is missing from some, and a
    range when more than three show it."""
    if len(m.per_run) == 1:
        error = m.first.cost_error
        plus = f" ± {fmt.percent(error)}" if error is not None else ""
        return f"{fmt.percent(m.first.cost)}{plus} of each iteration"
    found = [(run, f) for run, f in m.per_run if f is not None]
    missing = len(m.per_run) - len(found)
    if len(found) <= 3:
        text = ", ".join(f"{fmt.percent(f.cost)} ({names.get(run, run)})" for run, f in found)
        text += " of each iteration"
    else:
        lo, hi = min(f.cost for _, f in found), max(f.cost for _, f in found)
        span = (
            fmt.percent(lo)
            if fmt.percent(lo) == fmt.percent(hi)
            else (f"{fmt.percent(lo)}–{fmt.percent(hi)}")
        )
        text = f"{span} of each iteration in {len(found)} of {len(m.per_run)} runs"
        missing = 0
    if missing:
        text += f"; not found in the {'other run' if missing == 1 else f'{missing} other runs'}"
    return text


def where(
    m: MergedFinding, places: fmt.Places, links: tuple[LinkLoad, ...] = (), brief: bool = False
) -> str:
    """Who the cause is: its source first when the finding names one (the host whose
    traffic causes it, the links it crosses), then who suffers: ranks with host and
    local rank, hosts; the run's busiest links when the finding names no source.
    ``brief``: the source by its hosts alone (where the finding's text gives the links)."""
    text = fmt.where(m.ranks, m.nodes, places)
    if m.source:
        hosts = [s for s in m.source if "→" not in s] if brief else []
        return f"source: {', '.join(hosts) or source_text(m)}; suffers: {text}"
    return f"{text}; busiest links: {link_text(links)}" if links else text


def source_text(m: MergedFinding) -> str:
    """'h3 — host link h3→leaf1, uplink leaf1→spine: 99% busy each (of 100 Mbit/s)'."""
    utils: dict[str, float] = {}
    rates: set[float] = set()
    for f in m.found:
        utils.update(f.evidence.get("link_utilisation_share") or {})
        rates.update((f.evidence.get("link_rate_bps") or {}).values())
    hosts = [s for s in m.source if s not in utils]
    links = [s for s in m.source if s in utils]
    shown = {fmt.percent(utils[x]) for x in links}
    if len(shown) == 1:
        busy = f"{', '.join(links)}: {shown.pop()} busy{' each' * (len(links) > 1)}"
    else:
        busy = ", ".join(f"{x} {fmt.percent(utils[x])} busy" for x in links)
    if busy and len(rates) == 1:
        busy += f" (of {fmt.bandwidth(rates.pop() / 8e9)})"
    if hosts and busy:
        return f"{', '.join(hosts)} — {busy}"
    return ", ".join(hosts) or busy


def link_text(links: tuple[LinkLoad, ...] | list[LinkLoad]) -> str:
    """'uplink leaf1→spine 98% busy, host link h3→leaf1 91% busy (of 100 Mbit/s)'; one
    figure when they all round to it: 'uplink leaf1→spine, uplink spine→leaf0: 97% busy
    each (of 100 Mbit/s)'."""
    kinds = {"host": "host link"}
    named = [f"{kinds.get(x.kind, x.kind)} {x.direction}" for x in links]
    utils = {fmt.percent(x.util) for x in links}
    if len(utils) == 1 and len(links) > 1:
        each = f"{', '.join(named)}: {utils.pop()} busy each"
    else:
        each = ", ".join(
            f"{n} {fmt.percent(x.util)} busy" for n, x in zip(named, links, strict=True)
        )
    rates = {x.rate_bps for x in links}
    return f"{each} (of {fmt.bandwidth(rates.pop() / 8e9)})" if len(rates) == 1 else each


def _links(m: MergedFinding, runs: dict[str, RunMetrics]) -> list[LinkLoad]:
    """The busiest links of the first run showing ``m`` whose directory has counters."""
    for run_name, f in m.per_run:
        run = runs.get(run_name)
        if f is None or run is None:
            continue
        loads = busiest_links(run.run, run_window(run.rank_steps))
        if loads:
            return loads
    return []


def quality_warnings(
    analysis: Analysis, merged: list[MergedFinding], names: dict[str, str]
) -> list[str]:
    """Why the numbers may be off: quality findings, lost events, missing ranks."""
    out = []
    multi = len(analysis.runs) > 1
    for m in merged:
        if not m.is_quality:
            continue
        for run, f in m.per_run:
            if f is not None and f.severity >= Severity.WARNING:
                out.append((f"{names.get(run, run)}: " if multi else "") + f.summary)
    for r in analysis.runs:
        prefix = f"{names[r.run]}: " if multi else ""
        lost = [w for w in r.warnings if "dropped" in w]
        out.extend(prefix + w for w in lost[:3])
        unusable = int(r.quality.get("unusable_events") or 0)
        if unusable:
            out.append(f"{prefix}{fmt.count(unusable)} events without a usable rank, step or time")
    return out


def _trust(analysis: Analysis) -> str:
    """What the data is: ranks traced, iterations, how well clocks are aligned (over all
    runs: the fewest ranks and iterations, the largest clock error)."""
    runs = analysis.runs
    each = " in each run" if len(runs) > 1 else ""
    traced = {(len(r.ranks), r.world_size) for r in runs}
    parts = [
        f"{n} of {w} ranks traced{each}"
        if len(traced) == 1
        else "ranks traced: " + ", ".join(f"{len(r.ranks)} of {r.world_size}" for r in runs)
        for n, w in [next(iter(traced))]
    ]
    steps = sorted({int(r.iteration.get("count", 0)) for r in runs})
    if len(steps) == 1:
        parts.append(f"{steps[0]} iterations measured{' each' if each else ''}")
    else:
        parts.append(f"{steps[0]}–{steps[-1]} iterations measured")
    clocks = [r.clock_uncertainty_ns for r in runs if r.clock_uncertainty_ns is not None]
    unaligned = [
        r
        for r in runs
        if r.clock_uncertainty_ns is None
        and r.world_size > 1
        and r.source not in ("synthetic", "simulator")
    ]
    if clocks:
        parts.append(f"clocks aligned within ±{fmt.duration_ns(max(clocks))}")
    if unaligned:
        parts.append("clocks not aligned" + (" in some runs" if clocks else ""))
    on_device = [r for r in runs if r.time_base.device]
    if on_device:
        some = " in some runs" if len(on_device) < len(runs) else ""
        parts.append(f"times on the device clock{some}")
    if any(r.time_base.mixed for r in runs):
        parts.append("host times where device times were incomplete")
    return ", ".join(parts)
