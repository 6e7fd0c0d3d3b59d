"""The test tiers: ``-m "not slow"`` is the fast one; CI runs the whole suite. Both on
one worker per idle core, the tests that time real ranks on a worker of their own."""

from __future__ import annotations

import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ci_command() -> str:
    """The one line of ``.ci/run`` that runs the tests."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    found = [ln for ln in lines if "-m pytest" in ln and not ln.lstrip().startswith("#")]
    assert len(found) == 1, found
    return found[0].strip()


def test_the_slow_marker_is_registered(pytestconfig):
    markers = {m.split(":")[0].strip() for m in pytestconfig.getini("markers")}
    assert {"slow", "multirank", "root"} <= markers


def test_ci_runs_the_whole_suite(pytestconfig):
    words = shlex.split(ci_command())
    command = words[words.index("pytest") :]
    assert command == ["pytest", "-q", "-n", "auto"], command  # no -m, -k, --deselect
    assert "PYTEST_ADDOPTS" not in (ROOT / ".ci" / "run").read_text()
    assert not {"-m", "-k"} & {w[:2] for w in pytestconfig.getini("addopts")}  # pyproject's
    # ... and it is the README's quickstart command 2, word for word
    assert ci_command() in (ROOT / "README.md").read_text().splitlines()


def test_no_multirank_or_root_test_is_in_the_fast_tier(request):
    for item in request.session.items:
        if item.get_closest_marker("multirank") or item.get_closest_marker("root"):
            assert item.get_closest_marker("slow"), item.nodeid


def test_every_multirank_or_root_test_is_timed_unless_marked_untimed(request):
    for item in request.session.items:
        if item.get_closest_marker("root"):
            assert item.get_closest_marker("timed"), item.nodeid
        elif item.get_closest_marker("multirank"):
            untimed = item.get_closest_marker("untimed") is not None
            assert untimed != (item.get_closest_marker("timed") is not None), item.nodeid


def test_no_test_that_starts_a_browser_is_in_the_fast_tier(request):
    browsers = [i for i in request.session.items if "chromium" in getattr(i, "fixturenames", ())]
    assert all(item.get_closest_marker("slow") for item in browsers), browsers


def test_every_test_has_a_time_limit(pytestconfig):
    assert pytestconfig.pluginmanager.hasplugin("timeout")
    assert 0 < float(pytestconfig.getini("timeout")) < 5400  # CI's own limit, 90 minutes
    assert pytestconfig.getini("timeout_method") == "signal"  # the run goes on past a hang


def test_the_readme_names_both_tiers():
    development = (ROOT / "README.md").read_text().split("## Development", 1)[1]
    commands = {line.split("#")[0].strip() for line in development.splitlines()}
    assert '.venv/bin/python -m pytest -q -n auto -m "not slow"' in commands
    assert ci_command().rsplit("&& ", 1)[1] in commands  # the full run, as CI runs it
