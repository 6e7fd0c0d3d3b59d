"""The registry of failure modes holds every mode's properties, and nothing else does.

Every mode has a title, advice, a detector in ``DETECTORS`` and a figure or a reason
for none (the figures themselves are checked against the report in
``tests/report/test_mode_figures.py``); the roles partition the modes; the lists the
registry replaced keep their members; and no module of the analysis or the reports
lists modes of its own or names a mode the registry does not know.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from syncpace.analysis import MODES, QUALITY_MODES, STOPPED, SYMPTOMS, Finding, Severity, modes
from syncpace.analysis.detectors import DETECTORS, advice
from syncpace.analysis.detectors.hosts import NETWORK_MODES
from syncpace.analysis.modes import BUILT_IN, Mode, Role

SRC = Path(__file__).resolve().parents[2] / "src" / "syncpace"


def test_the_roles_partition_the_modes() -> None:
    by_role = {role: modes.names(lambda m, r=role: m.role is r) for role in Role}
    assert all(by_role.values()), f"a role without a mode: {by_role}"
    every = [name for names in by_role.values() for name in names]
    assert sorted(every) == sorted(modes.names()), "a mode in two roles, or in none"
    assert len(set(modes.names())) == len(modes.names()) == len(BUILT_IN)


def test_the_replaced_lists_keep_their_members() -> None:
    """The lists as they were before the registry: the queries that replace them must
    give the same members, so what used them behaves the same."""
    assert MODES == (
        "hang",
        "desync",
        "straggler",
        "cpu_starvation",  # added since: the late arrivals of a host starved of CPU
        "sync_amplification",
        "stall",
        "fabric_contention",
        "slow_link",
        "locality_variance",
        "latency_bound",
        "bandwidth_bound",
        "poor_overlap",
        "comm_dominated",
        "incomplete_trace",
        "insufficient_data",
        "clock_uncertainty",
        "healthy",
    )
    assert QUALITY_MODES == ("incomplete_trace", "insufficient_data", "clock_uncertainty")
    assert SYMPTOMS == ("comm_dominated",)
    assert STOPPED == ("hang", "desync")
    # hosts.NETWORK_MODES: the findings the hosts' counters are attached to
    assert set(NETWORK_MODES) == {
        "fabric_contention",
        "bandwidth_bound",
        "comm_dominated",
        "slow_link",
    }
    # diagnosis._NETWORK: the causes that make exposed communication their symptom
    assert set(modes.names(lambda m: modes.network_cause(m.name))) == {
        "fabric_contention",
        "slow_link",
        "bandwidth_bound",
    }
    # diagnosis._SKEW_BASED: halved by an untrustworthy clock
    assert set(modes.names(lambda m: m.skew_based)) == {
        "straggler",
        "locality_variance",
        "sync_amplification",
        "stall",
    }


def test_every_mode_has_a_title_and_advice() -> None:
    for mode in BUILT_IN:
        assert mode.title.strip(), mode.name
        words = getattr(advice, mode.name, None)
        assert callable(words), f"no detectors.advice.{mode.name}() words {mode.name}'s actions"


def _detector(ref: str) -> object:
    module, _, name = ref.rpartition(".")
    return getattr(importlib.import_module(f"syncpace.analysis.detectors.{module}"), name)


def test_every_mode_names_a_detector_that_runs() -> None:
    """Each mode's detector is in DETECTORS, and each detector there finds some mode:
    a detector left out of the list, or a mode nothing finds, fails here."""
    named = {}
    for mode in BUILT_IN:
        if mode.detector is None:
            assert mode.name == "healthy", f"{mode.name}: only diagnose's own note has none"
            continue
        named[mode.name] = _detector(mode.detector)
        assert named[mode.name] in DETECTORS, f"{mode.detector} is not in DETECTORS"
    assert set(DETECTORS) <= set(named.values()), "a detector no mode names"


def test_every_mode_has_a_figure_or_says_why_not() -> None:
    for mode in BUILT_IN:
        assert (mode.figure is None) != (not mode.no_figure), mode.name
        assert mode.figure or len(mode.no_figure) > 20, f"{mode.name}: say why, in words"


@pytest.mark.parametrize(
    "fields, rule",
    [
        ({"name": "Two Words"}, "snake_case"),
        ({"title": " "}, "no title"),
        ({"role": "cause"}, "role must be a Role"),
        ({"figure": None}, "either a figure or why"),
        ({"no_figure": "both"}, "either a figure or why"),
    ],
)
def test_a_mode_record_refuses_what_breaks_its_contract(fields: dict, rule: str) -> None:
    good = {"name": "toy", "title": "Toy", "role": Role.CAUSE, "detector": None}
    with pytest.raises(ValueError, match=rule):
        Mode(**{**good, "figure": "healthy", **fields})


def test_registering_adds_a_mode_and_refuses_a_taken_name() -> None:
    toy = Mode("toy_mode", "Toy", Role.CAUSE, None, None, "a toy draws nothing")
    with pytest.raises(ValueError, match="unknown mode"):
        Finding("toy_mode", Severity.INFO, 1.0, "x")
    modes.register(toy)
    try:
        assert modes.get("toy_mode") is toy and "toy_mode" in modes.names()
        assert Finding("toy_mode", Severity.INFO, 1.0, "x").mode == "toy_mode"
        with pytest.raises(ValueError, match="already registered"):
            modes.register(toy)
        assert "toy_mode" not in MODES  # the constants are the built-in modes
    finally:
        modes.unregister("toy_mode")
    assert not modes.is_registered("toy_mode")
    with pytest.raises(ValueError, match="built in"):
        modes.unregister("straggler")


# The source: no list of modes outside the registry, no mode the registry lacks ------------

#: Where a mode string means a mode: the analysis, the reports, and the compositions
#: that read findings.
SCANNED = ("analysis", "report", "demo", "validate", "cli")
#: Calls whose keyword names a mode: ``Finding(mode=...)``, ``replace(f, mode=...)``,
#: and a counterfactual's ``cause=`` (plotly's ``mode="lines"`` is no mode).
MODE_KEYWORDS = {"Finding": "mode", "replace": "mode", "counterfactual": "cause"}
MODE_KEYWORDS |= {"evaluate": "cause"}


def _sources() -> list[tuple[str, ast.Module]]:
    out = []
    for package in SCANNED:
        for path in sorted((SRC / package).rglob("*.py")):
            rel = path.relative_to(SRC).as_posix()
            if rel != "analysis/modes.py":
                out.append((rel, ast.parse(path.read_text(), rel)))
    return out


def _is_mode(node: ast.AST) -> bool:
    """``f.mode``, ``m.mode`` or a variable called ``mode``."""
    return (isinstance(node, ast.Attribute) and node.attr == "mode") or (
        isinstance(node, ast.Name) and node.id == "mode"
    )


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _mode_strings(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, string) for each string the code uses as a mode: compared with a mode,
    passed as ``mode=``/``cause=``, or the first argument of ``ctx.finding(...)``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_mode(s) for s in sides):
                found += [(node.lineno, s) for side in sides for s in _strings(side)]
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            for kw in node.keywords:
                if kw.arg is not None and MODE_KEYWORDS.get(called) == kw.arg:
                    found += [(node.lineno, s) for s in _strings(kw.value)]
            if called == "finding" and node.args:
                found += [(node.lineno, s) for s in _strings(node.args[0])]
    return found


def _mode_lists(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, names) for each collection literal (tuple, list, set, dict keys) of
    strings that is a list of modes kept outside the registry: two or more of its
    strings are modes' names, or all of them are. (A table of other names that holds
    one mode's name — the verbs, with ``hang``; the live monitor's detection kinds, with
    ``straggler`` — is not a list of modes.)"""
    known = set(modes.names())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        else:
            continue
        strings = [s for item in items for s in _strings(item)]
        named = [s for s in strings if s in known]
        if len(named) >= 2 or (named and len(named) == len(items)):
            found.append((node.lineno, ", ".join(named)))
    return found


def test_the_source_names_only_registered_modes() -> None:
    known = set(modes.names())
    wrong = [
        f"{rel}:{line}: {s!r}"
        for rel, tree in _sources()
        for line, s in _mode_strings(tree)
        if s not in known
    ]
    assert not wrong, "mode strings the registry does not know:\n" + "\n".join(wrong)


def test_no_list_of_modes_outside_the_registry() -> None:
    lists = [
        f"{rel}:{line}: {names}" for rel, tree in _sources() for line, names in _mode_lists(tree)
    ]
    assert not lists, (
        "lists of modes outside analysis/modes.py (make them a query on the registry):\n"
        + "\n".join(lists)
    )


def test_the_scanner_sees_what_it_looks_for() -> None:
    """The two source checks catch a typo and a list of modes (and pass the rest)."""
    tree = ast.parse(
        'if f.mode == "slow_links": pass\n'
        'ctx.finding("straggler", 0.1)\n'
        'NETWORK = ("fabric_contention", "slow_link")\n'
        'SYMPTOMS = ("comm_dominated",)\n'
        'VERBS = ("diagnose", "hang")\n'
        'fig.add_scatter(mode="lines")\n'
        'Finding(mode="stragler")\n'
    )
    assert _mode_strings(tree) == [(1, "slow_links"), (2, "straggler"), (7, "stragler")]
    assert _mode_lists(tree) == [(3, "fabric_contention, slow_link"), (4, "comm_dominated")]
