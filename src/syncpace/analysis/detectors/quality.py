"""Data-quality findings: is the trace complete, and can its skews be trusted?"""

from __future__ import annotations

from syncpace.analysis.detectors import advice
from syncpace.analysis.detectors.context import Context
from syncpace.analysis.findings import Finding, Severity

_INCOMPLETE_WARN = 0.01  # share of unmatched instances worth a warning, not just a note


def incomplete_trace(ctx: Context) -> list[Finding]:
    m, q = ctx.metrics, ctx.metrics.quality
    instances = max(q["instances"], 1)
    share = q["incomplete_instances"] / instances
    ranks = q.get("completeness", {}).values()
    unfinished = sorted(c["rank"] for c in ranks if not c["finished"])
    cut = sorted(c["rank"] for c in ranks if c["cut"] or c["events_missing"] or c["steps_missing"])
    invalid = sum(c["events_invalid"] + c["steps_invalid"] for c in ranks)
    dropped = sum(c["events_dropped"] for c in ranks)
    write_errors = sorted(c["rank"] for c in ranks if c["write_error"])
    problems = []
    if m.missing_ranks:
        problems.append(f"{len(m.missing_ranks)} of {m.world_size} ranks have no trace")
    if q["incomplete_instances"]:
        problems.append(
            f"{q['incomplete_instances']} of {q['instances']} collectives lack some ranks"
        )
    if q["size_mismatched_instances"]:
        problems.append(
            f"{q['size_mismatched_instances']} collectives disagree on their size across "
            "ranks (sequence numbers out of step?)"
        )
    if unfinished:
        problems.append(f"ranks {_short(unfinished)} did not finish cleanly")
    if cut:
        problems.append(f"ranks {_short(cut)} hold less than they declare (streams cut)")
    if write_errors:
        problems.append(f"ranks {_short(write_errors)} stopped writing (disk full, read-only)")
    if invalid:
        problems.append(f"{invalid} rows left out as invalid")
    if dropped:
        problems.append(f"{dropped} events dropped in the job (buffer full)")
    minority = q.get("minority_instances", 0)
    if minority:
        problems.append(
            f"{minority} collectives were made by fewer than half of their ranks "
            "(sequence numbers out of step?)"
        )
    if not problems:
        return []
    serious = bool(
        m.missing_ranks
        or share > _INCOMPLETE_WARN
        or q["size_mismatched_instances"]
        or minority
        or cut
        or invalid
        or write_errors
    )
    lossy = sorted({*m.missing_ranks, *unfinished, *cut, *write_errors})
    return [
        Finding(
            mode="incomplete_trace",
            severity=Severity.WARNING if serious else Severity.INFO,
            confidence=1.0,
            summary="trace is incomplete: " + "; ".join(problems),
            ranks=tuple(lossy),
            evidence={
                "missing_ranks": list(m.missing_ranks),
                "unfinished_ranks": unfinished,
                "cut_ranks": cut,
                "invalid_rows": invalid,
                "dropped_events": dropped,
                "incomplete_instances": q["incomplete_instances"],
                "incomplete_share": round(share, 4),
                "size_mismatched_instances": q["size_mismatched_instances"],
                "minority_instances": minority,
                "reader_warnings": list(m.warnings)[:20],
            },
            actions=advice.incomplete_trace(),
            run=m.run,
        )
    ]


def insufficient_data(ctx: Context) -> list[Finding]:
    """An empty or near-empty trace is no evidence of health: say so, as a warning, so
    the diagnosis never calls it healthy."""
    m, q = ctx.metrics, ctx.metrics.quality
    need = ctx.thresholds.min_steps
    problems = []
    if q.get("steps", 0) == 0 and q.get("instances", 0):
        problems.append(
            f"no iteration boundary was seen in {q['instances']} collectives: no "
            "optimizer.step() ran under the tracer, so there are no per-iteration figures; "
            "call syncpace.step() at the end of each iteration"
        )
    elif q.get("steps", 0) == 0:
        problems.append("no iterations were recorded")
    elif q.get("steps_analyzed", 0) < need:
        problems.append(
            f"only {q.get('steps_analyzed', 0)} iterations to analyse (at least {need} needed)"
        )
    if m.world_size > 1 and q.get("events", 0) == 0:
        problems.append("no collectives were recorded")
    if not problems:
        return []
    return [
        Finding(
            mode="insufficient_data",
            severity=Severity.WARNING,
            confidence=1.0,
            summary="too little data to judge this run: " + "; ".join(problems),
            evidence={
                "steps": q.get("steps", 0),
                "steps_analyzed": q.get("steps_analyzed", 0),
                "events": q.get("events", 0),
                "min_steps": need,
                "collectives": q.get("instances", 0),
            },
            actions=advice.insufficient_data(),
            run=m.run,
        )
    ]


def _short(ranks: list[int]) -> str:
    return ",".join(map(str, ranks[:8])) + ("…" if len(ranks) > 8 else "")


def clock_uncertainty(ctx: Context) -> list[Finding]:
    m, q = ctx.metrics, ctx.metrics.quality
    uncertainty = m.clock_uncertainty_ns
    skew = q["median_skew_ns"]
    if uncertainty is None:
        if m.world_size > 1 and m.source not in ("synthetic", "simulator"):
            return [
                Finding(
                    mode="clock_uncertainty",
                    severity=Severity.WARNING,
                    confidence=1.0,
                    summary="clock offsets were never estimated: arrival skews are not trustworthy",
                    evidence={"median_skew_ns": skew},
                    actions=advice.clock_uncertainty(estimated=False),
                    run=m.run,
                )
            ]
        return []
    if q["instances"] == 0 or uncertainty * ctx.thresholds.clock_trust_factor <= skew:
        return []
    return [
        Finding(
            mode="clock_uncertainty",
            severity=Severity.WARNING,
            confidence=1.0,
            summary=(
                f"clock uncertainty ({uncertainty / 1e3:.1f} us) exceeds the median arrival "
                f"skew ({skew / 1e3:.1f} us): skew, wait and last-arriver numbers are not "
                "trustworthy"
            ),
            evidence={"clock_uncertainty_ns": uncertainty, "median_skew_ns": skew},
            actions=advice.clock_uncertainty(estimated=True),
            run=m.run,
        )
    ]
