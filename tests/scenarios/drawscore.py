"""Scoring drawn scenarios from their saved files (:mod:`drawrun`), against what the
reruns measured rather than against the labels alone.

Per planted phase the **measured cost** of the cause is (iteration with it - without)
/ with, "without" being the mean of the clean phases right before and after it: the
same job seconds apart, under the same load. Then:

* (a) **first cause**: where the measured cost reaches the reporting threshold
  (``Thresholds().warning_cost``), the first cause the diagnosis reports (warning or
  worse, no symptom) must be a planted one. Causes the clean phases of the same run
  report too are the job's or the machine's own, not the plant's, and are passed over
  (the raw first cause is kept beside it). The planted ranks must be named exactly
  (a straggler's, a stall's, a CPU-starved host's), the planted host among a slow
  link's hosts;
* (b) **counterfactual against the rerun**: the saving the replay predicts without the
  planted cause against the measured cost: median and p90 of the error, by cause kind
  and by strength;
* (c) **false criticals**: a critical cause in a phase of a healthy draw (or a clean
  phase of a planted one that the plant does not explain);
* (d) **the verdict never contradicts the replay**: every what-if row of a cause whose
  saving less its error reaches the threshold has a finding of that cause at the
  severity it maps to (or it is a symptom);
* (e) **stability**: a draw run twice names the same first cause at the same place.

Plus the confusion matrix (planted against first found) and the share of healthy
draws beside CPU burners that name a straggler.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

import draws
import suite

from syncpace.analysis import Thresholds, modes
from syncpace.analysis.costs import severity
from syncpace.analysis.findings import Severity
from syncpace.analysis.modes import Role

NOT_CAUSES = ("healthy", "clock_uncertainty")
LEVEL = {"info": 0, "warning": 1, "critical": 2}
#: What a job without any plant can have by its own shape: blocking all-reduces after
#: the compute (or a CPU-only DDP's short backward) overlap nothing, and large buckets
#: on loopback or a slow link are bandwidth-bound. A critical one of these in a phase
#: without a plant is counted, and also told apart from the others.
SHAPE_MODES = ("poor_overlap", "bandwidth_bound")
#: How far a saving less its error can be off in a file that keeps 4 decimals of each.
ROUNDING = 1e-4
STRENGTHS = ((0.0, 0.33, "weak"), (0.33, 0.67, "medium"), (0.67, 1.01, "strong"))


def reported(phase: dict[str, Any], at: str = "warning") -> list[dict[str, Any]]:
    """The causes a phase's diagnosis reports at ``at`` or worse, in its order."""
    return [
        f
        for f in phase["findings"]
        if not f["symptom"] and f["mode"] not in NOT_CAUSES and LEVEL[f["severity"]] >= LEVEL[at]
    ]


def _background(run: dict[str, Any]) -> set[str]:
    return {f["mode"] for p in run["phases"] if p["kind"] == suite.CLEAN for f in reported(p)}


def strength_bucket(strength: float) -> str:
    return next(name for low, high, name in STRENGTHS if low <= strength < high)


def _measured(
    run: dict[str, Any], phase: dict[str, Any]
) -> tuple[float | None, float | None, float | None]:
    """(cost, clean ms, drift) of a planted phase from the clean phases next to it; the
    drift is how far those two disagree, as a share of the planted phase's iteration:
    what the machine alone moves a rerun by (None with one neighbour)."""
    by_index = {p["index"]: p for p in run["phases"]}
    around = [
        by_index[j]["iteration_ms"]
        for j in (phase["index"] - 1, phase["index"] + 1)
        if j in by_index and by_index[j]["kind"] == suite.CLEAN
    ]
    planted = phase["iteration_ms"]
    if not around or planted <= 0:
        return None, None, None
    clean = statistics.mean(around)
    drift = abs(around[0] - around[1]) / planted if len(around) == 2 else None
    return (planted - clean) / planted, clean, drift


def _named(draw: dict[str, Any], finding: dict[str, Any] | None) -> bool:
    """Whether the finding of the planted mode names where it was planted."""
    if finding is None:
        return False
    cause = next((c for c in draw["causes"] if draws.MODE[c["kind"]] == finding["mode"]), None)
    if cause is None:
        return True
    if cause["ranks"] and sorted(finding["ranks"]) != sorted(cause["ranks"]):
        return False
    if cause["kind"] == "slow_link":
        return set(cause["nodes"]) <= set(finding["nodes"])
    if cause["nodes"]:
        return sorted(finding["nodes"]) == sorted(cause["nodes"])
    return True


def planted_cases(record: dict[str, Any], th: Thresholds | None = None) -> list[dict[str, Any]]:
    """One case per planted phase of each whole run of a draw."""
    th = th or Thresholds()
    draw = record["draw"]
    planted = {draws.MODE[c["kind"]] for c in draw["causes"]}
    out: list[dict[str, Any]] = []
    if not planted:
        return out
    for run in record["runs"]:
        if run.get("error"):
            continue
        background = _background(run) - planted
        for phase in run["phases"]:
            if phase["kind"] != suite.PLANTED:
                continue
            cost, clean, drift = _measured(run, phase)
            found = reported(phase)
            beyond = [f for f in found if f["mode"] not in background]
            top = beyond[0] if beyond else None
            first = top is not None and top["mode"] in planted
            predicted = phase.get("predicted_ms")
            saving = None
            if predicted is not None and phase["iteration_ms"] > 0:
                saving = (phase["iteration_ms"] - predicted) / phase["iteration_ms"]
            out.append(
                {
                    "seed": draw["seed"],
                    "where": draw["where"],
                    "split": draw["split"],
                    "label": draw["label"],
                    "kinds": [c["kind"] for c in draw["causes"]],
                    "strength": max(c["strength"] for c in draw["causes"]),
                    "run": run["run"],
                    "phase": phase["index"],
                    "planted_ms": phase["iteration_ms"],
                    "clean_ms": clean,
                    "measured": cost,
                    "drift": drift,
                    "above": cost is not None and cost >= th.warning_cost,
                    # above the threshold by more than the clean reruns disagree
                    "sure": cost is not None and cost - (drift or 0.0) >= th.warning_cost,
                    "top_raw": found[0]["mode"] if found else suite.HEALTHY,
                    "top": top["mode"] if top else suite.HEALTHY,
                    "top_ranks": top["ranks"] if top else [],
                    "top_nodes": top["nodes"] if top else [],
                    "first": first,
                    "named": first and _named(draw, top),
                    "found": bool(planted & {f["mode"] for f in found}),
                    "predicted_saving": saving,
                    "predicted_by": phase.get("predicted_by", ""),
                    "error": None if saving is None or cost is None else saving - cost,
                }
            )
    return out


def clean_cases(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One case per phase without a plant: every phase of a healthy draw, the clean
    phases of a planted one (a critical cause there is false unless planted)."""
    draw = record["draw"]
    planted = {draws.MODE[c["kind"]] for c in draw["causes"]}
    out = []
    for run in record["runs"]:
        if run.get("error"):
            continue
        for phase in run["phases"]:
            if phase["kind"] != suite.CLEAN:
                continue
            found = reported(phase)
            critical = [f["mode"] for f in reported(phase, "critical") if f["mode"] not in planted]
            out.append(
                {
                    "seed": draw["seed"],
                    "where": draw["where"],
                    "healthy": not draw["causes"],
                    "contended": draw.get("contended", 0),
                    "run": run["run"],
                    "phase": phase["index"],
                    "top": found[0]["mode"] if found else suite.HEALTHY,
                    "false_critical": critical,
                    "beyond_shape": [m for m in critical if m not in SHAPE_MODES],
                    "straggler": any(f["mode"] == "straggler" for f in found),
                }
            )
    return out


def contradictions(record: dict[str, Any], th: Thresholds | None = None) -> list[str]:
    """(d): what-if rows of a cause at the reporting threshold or above whose cause the
    verdict does not report at the severity the row maps to."""
    th = th or Thresholds()
    out = []
    for run in record["runs"]:
        for phase in run.get("phases", []):
            for row in phase["what_if"]:
                cause = row.get("cause", "")
                if (
                    not cause
                    or not modes.is_registered(cause)
                    or not modes.has_role(cause, Role.CAUSE)
                ):
                    continue
                # the file keeps 4 decimals: a row at the threshold by less is not judged
                need = severity(row["saving"] - ROUNDING, row["error"], th)
                if need < Severity.WARNING:
                    continue
                same = [f for f in phase["findings"] if f["mode"] == cause]
                if not any(f["symptom"] or LEVEL[f["severity"]] >= int(need) for f in same):
                    out.append(
                        f"{draw_name(record)} run {run['run']} phase {phase['index']}: "
                        f"{row['name']} saves {row['saving']:.1%} ± {row['error']:.1%}, "
                        f"{cause} not reported at {need}"
                    )
    return out


def draw_name(record: dict[str, Any]) -> str:
    return f"{record['draw']['where']}-{record['draw']['seed']}"


def verdict(
    record: dict[str, Any], run: dict[str, Any]
) -> tuple[str, tuple[int, ...], tuple[str, ...]]:
    """A run's verdict: the first cause (beyond its clean phases' own) most of its
    planted phases name, with its place; for a healthy draw, what its phases name."""
    healthy = not record["draw"]["causes"]
    background = set() if healthy else _background(run)
    seen: Counter = Counter()
    for phase in run["phases"]:
        if phase["kind"] != (suite.CLEAN if healthy else suite.PLANTED):
            continue
        found = [f for f in reported(phase) if f["mode"] not in background]
        top = found[0] if found else None
        seen[
            (top["mode"], tuple(top["ranks"]), tuple(top["nodes"]))
            if top
            else (suite.HEALTHY, (), ())
        ] += 1
    return seen.most_common(1)[0][0] if seen else (suite.HEALTHY, (), ())


def stability(record: dict[str, Any]) -> bool | None:
    """(e): whether every whole run of a draw gives the same verdict (None: run once)."""
    whole = [r for r in record["runs"] if not r.get("error")]
    if len(whole) < 2:
        return None
    return len({verdict(record, r) for r in whole}) == 1


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def errors_of(cases: list[dict[str, Any]]) -> dict[str, Any]:
    errs = [abs(c["error"]) for c in cases if c["error"] is not None]
    if not errs:
        return {"n": 0}
    return {
        "n": len(errs),
        "median": statistics.median(errs),
        "p90": _quantile(errs, 0.9),
        "max": max(errs),
    }


def summarize(records: list[dict[str, Any]], th: Thresholds | None = None) -> dict[str, Any]:
    """Every score of a set of draws, as plain data (what the benchmark prints and saves)."""
    th = th or Thresholds()
    planted = [c for r in records for c in planted_cases(r, th)]
    clean = [c for r in records for c in clean_cases(r)]
    above = [c for c in planted if c["above"]]
    sure = [c for c in planted if c["sure"]]
    below = [c for c in planted if not c["above"] and c["measured"] is not None]
    by_kind: dict[str, list] = defaultdict(list)
    by_strength: dict[str, list] = defaultdict(list)
    for c in planted:
        by_kind["+".join(sorted(c["kinds"]))].append(c)
        by_strength[strength_bucket(c["strength"])].append(c)
    healthy = [c for c in clean if c["healthy"]]
    contended_draws = {(c["where"], c["seed"]) for c in healthy if c["contended"]}
    straggling = {(c["where"], c["seed"]) for c in healthy if c["contended"] and c["straggler"]}
    stable = [(draw_name(r), stability(r)) for r in records]
    return {
        "draws": len(records),
        "runs": sum(len(r["runs"]) for r in records),
        "failed_runs": [
            f"{draw_name(r)} run {x['run']}: {x['error']}"
            for r in records
            for x in r["runs"]
            if x.get("error")
        ],
        "warning_cost": th.warning_cost,
        "a_first": {
            "phases_above": len(above),
            "first": sum(c["first"] for c in above),
            "named": sum(c["named"] for c in above),
            "first_raw": sum(c["top_raw"] in c["label"].split("+") for c in above),
            "phases_sure": len(sure),
            "sure_first": sum(c["first"] for c in sure),
            "sure_named": sum(c["named"] for c in sure),
            "phases_below": len(below),
            "below_found": sum(c["found"] for c in below),
        },
        "b_error": {
            "all": errors_of(planted),
            "above": errors_of(above),
            "sure": errors_of(sure),
            "by_kind": {k: errors_of(v) for k, v in sorted(by_kind.items())},
            "by_strength": {k: errors_of(v) for k, v in sorted(by_strength.items())},
        },
        "c_false_critical": {
            **_criticals(clean, "false_critical"),
            "beyond_shape": _criticals(clean, "beyond_shape"),
            "modes": dict(Counter(m for c in clean for m in c["false_critical"])),
        },
        "d_contradictions": [x for r in records for x in contradictions(r, th)],
        "d_phases": sum(len(x.get("phases", [])) for r in records for x in r["runs"]),
        "e_stability": {
            "run_twice": sum(s is not None for _, s in stable),
            "stable": sum(s is True for _, s in stable),
            "unstable": [n for n, s in stable if s is False],
        },
        "contended_healthy": {"draws": len(contended_draws), "name_straggler": len(straggling)},
        "confusion": confusion(planted, healthy),
        "misses": [
            {
                k: c[k]
                for k in (
                    "where",
                    "seed",
                    "run",
                    "phase",
                    "label",
                    "measured",
                    "drift",
                    "sure",
                    "top",
                    "top_ranks",
                    "top_nodes",
                    "first",
                    "named",
                )
            }
            for c in above
            if not (c["first"] and c["named"])
        ],
        "cases": planted,
    }


def _criticals(clean: list[dict[str, Any]], key: str) -> dict[str, int]:
    healthy = [c for c in clean if c["healthy"]]
    return {
        "healthy_phases": len(healthy),
        "healthy_phases_critical": sum(bool(c[key]) for c in healthy),
        "healthy_draws": len({(c["where"], c["seed"]) for c in healthy}),
        "healthy_draws_critical": len({(c["where"], c["seed"]) for c in healthy if c[key]}),
        "clean_phases_of_planted": sum(not c["healthy"] for c in clean),
        "clean_phases_of_planted_critical": sum(bool(c[key]) for c in clean if not c["healthy"]),
    }


def confusion(
    planted: list[dict[str, Any]], healthy: list[dict[str, Any]]
) -> dict[str, dict[str, int]]:
    """Rows: what was planted (a cause measured below the threshold apart, ``(<5%)``);
    columns: the first cause found; cells: phases."""
    table: dict[str, Counter] = defaultdict(Counter)
    for c in planted:
        if c["measured"] is None:
            continue
        row = c["label"] if c["above"] else f"{c['label']} (<5%)"
        table[row][c["top"]] += 1
    for c in healthy:
        table["healthy"][c["top"]] += 1
    return {row: dict(cols) for row, cols in sorted(table.items())}


def confusion_text(table: dict[str, dict[str, int]]) -> str:
    if not table:
        return "(no phases)"
    cols = sorted({c for row in table.values() for c in row})
    width = max(len(r) for r in table) + 2
    lines = ["planted \\ found".ljust(width) + "".join(f"{i + 1:>5}" for i in range(len(cols)))]
    for row, counts in table.items():
        lines.append(row.ljust(width) + "".join(f"{counts.get(c, 0) or '.':>5}" for c in cols))
    lines.append("found: " + ", ".join(f"{i + 1} {c}" for i, c in enumerate(cols)))
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _err_line(name: str, e: dict[str, Any]) -> str:
    if not e.get("n"):
        return f"  {name:<34} n   0"
    median, p90, top = (_pct(e[k]) for k in ("median", "p90", "max"))
    return f"  {name:<34} n {e['n']:>3}  median {median:>6}  p90 {p90:>6}  max {top:>6}"


def summary_text(s: dict[str, Any]) -> str:
    """The scores as text: what the benchmark prints and the docs quote."""
    a, c, e = s["a_first"], s["c_false_critical"], s["e_stability"]
    x = c["beyond_shape"]
    cut = f"{s['warning_cost']:.0%}"
    lines = [
        f"{s['draws']} draws, {s['runs']} runs ({len(s['failed_runs'])} failed)",
        f"(a) planted phases measured >= {cut}: {a['phases_above']}; planted cause first "
        f"{a['first']} (raw, the clean phases' own causes not passed over: {a['first_raw']}), "
        f"named exactly {a['named']}; measured below {cut}: {a['phases_below']}, the planted "
        f"cause reported anyway in {a['below_found']}",
        f"    of them above {cut} by more than the clean reruns around them disagree: "
        f"{a['phases_sure']}; first {a['sure_first']}, named exactly {a['sure_named']}",
        "(b) |predicted saving - measured cost| (points of the iteration):",
        _err_line("all planted phases", s["b_error"]["all"]),
        _err_line(f"measured >= {cut}", s["b_error"]["above"]),
        _err_line("... beyond the reruns' disagreement", s["b_error"]["sure"]),
    ]
    lines += [_err_line(k, v) for k, v in s["b_error"]["by_kind"].items()]
    lines += [_err_line(f"strength {k}", v) for k, v in s["b_error"]["by_strength"].items()]
    contended = s["contended_healthy"]
    lines += [
        f"(c) healthy draws with a false critical: {c['healthy_draws_critical']} of "
        f"{c['healthy_draws']} ({c['healthy_phases_critical']} of {c['healthy_phases']} "
        f"phases); clean phases of planted draws: {c['clean_phases_of_planted_critical']} of "
        f"{c['clean_phases_of_planted']}; by mode {c['modes']}",
        f"    not of the job's shape ({', '.join(SHAPE_MODES)}): healthy draws "
        f"{x['healthy_draws_critical']} of {x['healthy_draws']} ({x['healthy_phases_critical']}"
        f" phases), clean phases of planted draws {x['clean_phases_of_planted_critical']}",
        f"(d) verdict against the replay: {len(s['d_contradictions'])} contradictions in "
        f"{s['d_phases']} phases",
        *[f"    {x}" for x in s["d_contradictions"]],
        f"(e) draws run twice: {e['run_twice']}, same verdict {e['stable']}"
        + (f"; differ: {', '.join(e['unstable'])}" if e["unstable"] else ""),
        f"healthy draws beside CPU burners naming a straggler: {contended['name_straggler']} "
        f"of {contended['draws']}",
        confusion_text(s["confusion"]),
    ]
    for m in s["misses"]:
        where = "; wrong place" if m["first"] and not m["named"] else ""
        lines.append(
            f"  missed: {m['where']}-{m['seed']} run {m['run']} phase {m['phase']}: planted "
            f"{m['label']} (measured {_pct(m['measured'])}, reruns disagree by "
            f"{_pct(m['drift'])}), first {m['top']} "
            f"{m['top_ranks']} {m['top_nodes']}{where}"
        )
    lines += [f"  failed: {f}" for f in s["failed_runs"]]
    return "\n".join(lines)
