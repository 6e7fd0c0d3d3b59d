"""Data-quality findings: is the trace complete, and can its skews be trusted?"""

from __future__ import annotations

from syncpace.analysis.detectors.context import Context
from syncpace.analysis.findings import Finding, Severity

_INCOMPLETE_WARN = 0.01  # share of unmatched instances worth a warning, not just a note


def incomplete_trace(ctx: Context) -> list[Finding]:
    m, q = ctx.metrics, ctx.metrics.quality
    instances = max(q["instances"], 1)
    share = q["incomplete_instances"] / instances
    unfinished = [w for w in m.warnings if "did not finish" in w or "cut short" in w]
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
        problems.append(f"{len(unfinished)} files were not closed cleanly")
    if not problems:
        return []
    minority = q.get("minority_instances", 0)
    if minority:
        problems.append(
            f"{minority} collectives were made by fewer than half of their ranks "
            "(sequence numbers out of step?)"
        )
    serious = (
        bool(m.missing_ranks)
        or share > _INCOMPLETE_WARN
        or q["size_mismatched_instances"]
        or minority
    )
    return [
        Finding(
            mode="incomplete_trace",
            severity=Severity.WARNING if serious else Severity.INFO,
            confidence=1.0,
            summary="trace is incomplete: " + "; ".join(problems),
            ranks=tuple(m.missing_ranks),
            evidence={
                "missing_ranks": list(m.missing_ranks),
                "incomplete_instances": q["incomplete_instances"],
                "incomplete_share": round(share, 4),
                "size_mismatched_instances": q["size_mismatched_instances"],
                "minority_instances": minority,
                "reader_warnings": list(m.warnings)[:20],
            },
            actions=(
                "Metrics use only the ranks and collectives present; treat per-rank "
                "conclusions about missing ranks as unknown.",
                "Re-run with every rank traced (check the tracer's dropped_events and "
                "that each rank exits cleanly).",
            ),
            run=m.run,
        )
    ]


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
                    actions=("Re-run with clock alignment enabled (see syncpace run --help).",),
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
            actions=(
                "Re-run with more clock rounds (SYNCPACE_CLOCK_ROUNDS) or a quieter "
                "store connection to tighten the offset estimate.",
                "Trust only skews well above the uncertainty.",
            ),
            run=m.run,
        )
    ]


def no_iteration_boundary(ctx: Context) -> list[Finding]:
    """No iteration was ever ended: per-iteration figures are meaningless, say why."""
    m = ctx.metrics
    if m.boundaries or m.quality["instances"] == 0:
        return []
    return [
        Finding(
            mode="no_iterations",
            severity=Severity.WARNING,
            confidence=1.0,
            summary=(
                f"no iteration boundary was seen in {m.quality['instances']} collectives: "
                "no optimizer.step() ran under the tracer, so there are no per-iteration "
                "figures; call syncpace.step() at the end of each iteration"
            ),
            evidence={"collectives": m.quality["instances"], "iteration_boundaries": 0},
            actions=(
                "Mark iterations by hand: import syncpace; call syncpace.step() once at "
                "the end of every training iteration (it replaces the optimizer.step() hook).",
                "A loop that steps its optimizer outside the traced process, or not at "
                "all (evaluation, a custom update), needs syncpace.step() too.",
            ),
            run=m.run,
        )
    ]
