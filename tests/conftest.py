import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from multirank import Restart, with_ranksite
from suiteschedule import (
    TIMED_FILE,
    TIMED_WORKER,
    TimedFirstScheduling,
    TimedSeat,
    read_timed,
    write_timed,
    yield_the_cpu,
)
from suiteworkers import auto_workers
from syncpace.report.browser import find_chromium

# Hypothesis's deadline is wall time per example: a test sharing the CPU with other work
# (a worker beside it, another job on the machine) would fail for the machine's load.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# Every process a test starts (syncpace's commands, the ranks they launch, the demo's,
# the fabric's) freezes its heap after its own exit handlers instead of collecting
# torch's objects at exit: ranksite/sitecustomize.py, last on the path as in rank_env.
os.environ["PYTHONPATH"] = with_ranksite(os.environ.get("PYTHONPATH"))


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config, items):
    """Multi-rank and root tests are slow (the fast tier, ``-m "not slow"``, leaves them
    out), and so are the tests that start a browser (seconds each: the page is drawn in
    headless Chromium). Root-only tests skip with a clear reason elsewhere (CI runs as
    root)."""
    skip = pytest.mark.skip(reason="needs root (network namespaces); CI runs as root")
    for item in items:
        root = item.get_closest_marker("root") is not None
        browser = "chromium" in getattr(item, "fixturenames", ())
        ranks = root or item.get_closest_marker("multirank") is not None
        if ranks or browser:
            item.add_marker(pytest.mark.slow)
        untimed = item.get_closest_marker("untimed") is not None and not root
        if ranks and not untimed:  # they time real ranks and links: a worker's CPU to them
            item.add_marker(pytest.mark.timed)
        if root and os.geteuid() != 0:
            item.add_marker(skip)


@pytest.hookimpl(tryfirst=True)  # before the worker tells the controller it collected
def pytest_collection_finish(session):
    timed_file = getattr(session.config, "workerinput", {}).get(TIMED_FILE)
    if timed_file:
        write_timed(timed_file, [i.nodeid for i in session.items if i.get_closest_marker("timed")])


def pytest_configure(config):
    """A worker without the timed seat yields the CPU to every normal process
    (``suiteschedule.py``): the timed tests' ranks never wait for a core behind it."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and not workerinput.get(TIMED_WORKER, True):
        yield_the_cpu()


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: :func:`suiteworkers.auto_workers`."""
    return auto_workers()


def _timed_file(config) -> str:
    return str(config._tmp_path_factory.getbasetemp() / "timed-tests.json")


_TIMED_SEAT = pytest.StashKey[TimedSeat]()


def _seat(config) -> TimedSeat:
    return config.stash.setdefault(_TIMED_SEAT, TimedSeat())


def pytest_configure_node(node):
    """Where each worker writes its ``timed`` tests' ids, and whether it holds the timed
    seat (``suiteschedule.py``): the first worker up, or the next once it is gone."""
    node.workerinput[TIMED_FILE] = _timed_file(node.config)
    # only where TimedFirstScheduling runs the suite (pytest_xdist_make_scheduler)
    scheduled_here = node.config.getoption("dist") == "load"
    node.workerinput[TIMED_WORKER] = not scheduled_here or _seat(node.config).take(node)


def pytest_xdist_make_scheduler(config, log):
    """``-n`` without another ``--dist``: the ``timed`` tests on one worker of normal CPU
    priority from the start, the others beside them at idle priority."""
    if config.getoption("dist") != "load":
        return None
    timed = lambda: read_timed(_timed_file(config))  # noqa: E731
    return TimedFirstScheduling(config, log, timed=timed, seat=_seat(config))


#: The demo's two runs as the demo recorded them (``tests/data/make_demo.py``).
DEMO_RUNS = [
    Path(__file__).resolve().parent / "data" / "demo" / run for run in ("trace", "trace-paced")
]


@pytest.fixture(scope="session")
def demo_runs_report(tmp_path_factory):
    """``(analysis, page)``: the demo's report phase on :data:`DEMO_RUNS`, as ``syncpace
    demo`` writes it into a directory of its own. Made once for every module that reads
    it: the same directories give the same analysis and page, and no test writes there."""
    # imported here: only the runs that read the demo's report pay for its imports (~1 s)
    from syncpace.demo.pipeline import report_runs

    return report_runs(DEMO_RUNS, tmp_path_factory.mktemp("demo-report"))


@pytest.fixture
def chromium() -> str:
    """Headless Chromium; skipped when absent, except under CI (which installs it)."""
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium); CI runs this test")
    return binary


def _restarts_here() -> list:
    modules = {id(m): m for m in map(sys.modules.get, ("multirank", "tests.multirank")) if m}
    return [r for m in modules.values() for r in m.RESTARTS]


#: The restarts each worker counted, sent here as it finishes (a run with workers).
_WORKER_RESTARTS: list = []


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: its restarts go to the controller
        workeroutput["restarts"] = [(r.what, r.attempt, r.reason) for r in _restarts_here()]


def pytest_testnodedown(node, error):
    for what, attempt, reason in getattr(node, "workeroutput", {}).get("restarts", ()):
        _WORKER_RESTARTS.append(Restart(what, attempt, reason))


def pytest_terminal_summary(terminalreporter):
    """Every multi-rank launch started again after a start-up connection failure is
    counted and named here: a retry must never hide a machine that keeps failing."""
    restarts = [*_restarts_here(), *_WORKER_RESTARTS]
    if not restarts:
        return
    terminalreporter.write_sep("=", f"{len(restarts)} multi-rank launch restart(s)", yellow=True)
    for r in restarts:
        terminalreporter.write_line(
            f"{r.what} started again after failing at start-up (attempt {r.attempt}): {r.reason}"
        )
