"""The suite's schedule with ``-n`` (tests/suiteschedule.py): the files holding a
``timed`` test on one worker of normal CPU priority from the start, every other file
beside them on workers that yield the CPU. Driven here as xdist drives it, with workers
that behave as xdist's do (each runs its tests in order and holds its last one until it
knows the next, or until it is shut down), and once for real, by pytest itself."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from suiteschedule import TimedFirstScheduling, TimedSeat


class Worker:
    """What the scheduler sees of an xdist worker, and what the worker does."""

    def __init__(self, name: str, seat: TimedSeat) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.normal = seat.take(self)  # as conftest's pytest_configure_node tells it
        self.queue: list[int] = []
        self.shutting_down = False
        self.left = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        assert not self.shutting_down
        self.queue.extend(indexes)

    def shutdown(self) -> None:  # as xdist's: a second one changes nothing
        self.shutting_down = True

    def can_run(self) -> bool:
        # xdist's worker runs a test once it knows the next one, or when shut down
        return len(self.queue) >= 2 or (self.queue and self.shutting_down)


def _config(workers: int):
    return SimpleNamespace(
        getvalue=lambda name: [f"{workers}*popen"], option=SimpleNamespace(loadscopereorder=True)
    )


def drive(files: dict[str, int], timed: set[str], workers: int = 2, seed: int = 0, crash=None):
    """Run a collection of ``files`` (name: number of tests) to the end; returns each
    test run, in order: ``(worker, its priority normal, nodeid, tests running elsewhere
    as (worker normal, nodeid))``. ``crash=k``: the timed worker dies at its k-th test
    and a new worker comes up."""
    rng = random.Random(seed)
    collection = [f"{f}::test_{i}" for f, n in files.items() for i in range(n)]
    timed_ids = {nid for nid in collection if nid.split("::")[0] in timed}
    seat = TimedSeat()
    sched = TimedFirstScheduling(_config(workers), timed=lambda: timed_ids, seat=seat)
    nodes = [Worker(f"gw{i}", seat) for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, collection)
    sched.schedule()
    ran, on_seat = [], 0
    for _ in range(10_000):
        for n in nodes:  # a worker shut down with nothing left leaves
            if n.shutting_down and not n.queue and not n.left:
                n.left = True
                sched.remove_node(n)
        ready = [n for n in nodes if not n.left and n.can_run()]
        if not ready:
            if all(n.left for n in nodes):
                return ran
            raise AssertionError(f"deadlock: {[(n.gateway.id, n.queue) for n in nodes]}")
        node = rng.choice(ready)  # any ready worker may finish its test first
        if crash is not None and node is seat.holder and on_seat == crash:
            crash, node.left, node.queue = None, True, []
            sched.remove_node(node)  # its running test is lost, the rest queued again
            clone = Worker(f"gw{len(nodes)}", seat)
            nodes.append(clone)
            sched.add_node(clone)
            sched.add_node_collection(clone, collection)
            sched.schedule()
            continue
        on_seat += node is seat.holder
        index = node.queue.pop(0)
        others = [(n.normal, collection[n.queue[0]]) for n in nodes if n is not node and n.queue]
        ran.append((node.gateway.id, node.normal, collection[index], others))
        sched.mark_test_complete(node, index)
    raise AssertionError("the run did not end")


FILES = {
    "tests/a.py": 5,
    "tests/b.py": 1,
    "tests/c.py": 3,
    "tests/d_root.py": 2,
    "tests/e.py": 4,
    "tests/f_ranks.py": 3,
    "tests/g.py": 2,
}
TIMED = {"tests/d_root.py", "tests/f_ranks.py"}


def _timed(nodeid: str) -> bool:
    return nodeid.split("::")[0] in TIMED


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("workers", [2, 3])
def test_timed_tests_run_first_on_one_normal_worker_and_only_yielding_ones_beside(seed, workers):
    ran = drive(FILES, TIMED, workers, seed)
    nodeids = [nid for _, _, nid, _ in ran]
    assert sorted(nodeids) == sorted(f"{f}::test_{i}" for f, n in FILES.items() for i in range(n))
    timed_runs = [(w, normal, others) for w, normal, nid, others in ran if _timed(nid)]
    # one worker of normal priority runs every timed test ...
    assert {w for w, _, _ in timed_runs} == {"gw0"}
    assert all(normal for _, normal, _ in timed_runs)
    # ... before any other test it runs ...
    on_gw0 = [nid for w, _, nid, _ in ran if w == "gw0"]
    assert all(_timed(nid) for nid in on_gw0[: len(timed_runs)])
    # ... and whatever runs beside a timed test is a shared one, on a yielding worker
    for _, _, others in timed_runs:
        assert all(not normal and not _timed(nid) for normal, nid in others), others
    # the shared files were spread over the workers, a file to one worker, and ran while
    # the timed ones did
    shared = {}
    for worker, _, nid, _ in ran:
        if not _timed(nid):
            shared.setdefault(nid.split("::")[0], set()).add(worker)
    assert all(len(w) == 1 for w in shared.values())
    assert len(set().union(*shared.values())) > 1
    assert any(others for _, _, others in timed_runs)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("crash", [0, 2, 4])
def test_a_timed_worker_that_dies_leaves_its_seat_to_the_next_one_up(seed, crash):
    ran = drive(FILES, TIMED, 2, seed, crash=crash)
    nodeids = [nid for _, _, nid, _ in ran]
    everything = {f"{f}::test_{i}" for f, n in FILES.items() for i in range(n)}
    # loadfile queues the dead worker's files again, the test it died in included
    assert len(nodeids) == len(set(nodeids)) and set(nodeids) == everything
    for _, normal, nid, others in ran:
        if _timed(nid):  # never two timed tests at once, and none beside an equal
            assert normal or not others, (nid, others)
            assert all(not n and not _timed(o) for n, o in others), (nid, others)


def test_only_timed_tests_or_none_at_all():
    ran = drive({"tests/d_root.py": 3, "tests/f_ranks.py": 2}, TIMED)
    assert {worker for worker, _, _, _ in ran} == {"gw0"} and len(ran) == 5
    ran = drive({"tests/a.py": 3, "tests/b.py": 2}, set())
    assert len(ran) == 5


def test_workers_writing_their_timed_ids_at_once_never_fail(tmp_path):
    """Every worker writes its timed ids when it has collected, the same moment for
    all: writers racing on one file each finish, and the file is one writer's whole."""
    target = tmp_path / "timed-tests.json"
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from suiteschedule import write_timed\n"
        "for i in range(300): write_timed(sys.argv[2], [f'tests/t.py::test_{i % 7}', 'a'])"
    )
    tests = os.path.dirname(__file__)
    writers = [
        subprocess.Popen([sys.executable, "-c", code, tests, str(target)], stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    errors = [w.communicate(timeout=120)[1].decode() for w in writers]
    assert [w.returncode for w in writers] == [0] * 4, errors
    assert json.loads(target.read_text())[0] == "a"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary left


def _at_normal_priority() -> None:
    """A child's start: the normal policy, whatever this test's worker runs at (a
    yielding worker's children inherit SCHED_IDLE; leaving it needs root)."""
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


@pytest.fixture
def normal_start():
    if os.sched_getscheduler(0) == os.SCHED_IDLE and os.geteuid() != 0:
        pytest.skip("this worker yields the CPU and only root may start a child above it")
    return _at_normal_priority


def test_a_worker_that_yields_the_cpu_is_below_every_normal_process(normal_start):
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); from suiteschedule import "
        "yield_the_cpu; before = os.sched_getscheduler(0) == os.SCHED_IDLE; "
        "print(before, yield_the_cpu(), os.sched_getscheduler(0) == os.SCHED_IDLE)"
    )
    tests = os.path.dirname(__file__)
    out = subprocess.run(
        [sys.executable, "-c", code, tests], capture_output=True, text=True, preexec_fn=normal_start
    )
    assert out.stdout.split() == ["False", "SCHED_IDLE", "True"], out


@pytest.mark.slow
def test_pytest_with_two_workers_runs_timed_tests_beside_yielding_ones(
    tmp_path, pytestconfig, normal_start
):
    """The real thing: pytest -n 2 on a small suite whose tests log when they start and
    end, in which process and at which CPU priority. The timed tests (marked by hand and
    by the multirank mark that conftest turns into timed) run one after the other in one
    process at normal priority; the others run beside them at idle priority."""
    log = tmp_path / "log.jsonl"
    suite = tmp_path / "suite"
    suite.mkdir()
    body = textwrap.dedent(
        f"""
        import json, os, time, pytest
        def _log(name, what):
            idle = os.sched_getscheduler(0) == os.SCHED_IDLE
            with open({str(log)!r}, "a") as f:
                f.write(json.dumps([name, what, time.monotonic(), os.getpid(), idle]) + "\\n")
        """
    )
    for name, mark in [("a", ""), ("b", ""), ("c", "timed"), ("d", "multirank"), ("e", "")]:
        tests = "".join(
            f"{('@pytest.mark.' + mark) if mark else ''}\n"
            f"def test_{name}{i}():\n"
            f"    _log('{name}{i}', 'start'); time.sleep(0.3); _log('{name}{i}', 'end')\n"
            for i in range(3)
        )
        (suite / f"test_{name}.py").write_text(body + tests)
    root = pytestconfig.rootpath
    # the suite's own hooks, under another module name than this conftest's
    (suite / "conftest.py").write_text(
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(root / 'tests')!r})\n"
        f"hooks_file = {str(root / 'tests' / 'conftest.py')!r}\n"
        "spec = importlib.util.spec_from_file_location('suite_hooks', hooks_file)\n"
        "hooks = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(hooks)\n"
        "globals().update({k: v for k, v in vars(hooks).items() if k.startswith('pytest_')})\n"
    )
    (suite / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    timed: x\n    multirank: x\n    slow: x\n    root: x\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", str(suite)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=suite,
        preexec_fn=normal_start,  # as a pytest started from a shell
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "15 passed" in done.stdout
    spans = {}
    for name, what, t, pid, idle in map(json.loads, log.read_text().splitlines()):
        spans.setdefault(name, {"pid": pid, "idle": idle})[what] = t
    timed = {n: s for n, s in spans.items() if n[0] in "cd"}
    shared = {n: s for n, s in spans.items() if n[0] not in "cd"}
    assert len(timed) == 6 and len(shared) == 9
    assert len({s["pid"] for s in timed.values()}) == 1
    assert not any(s["idle"] for s in timed.values())

    def overlap(s, o):
        return o["start"] < s["end"] and s["start"] < o["end"]

    beside = [o for s in timed.values() for o in spans.values() if o is not s and overlap(s, o)]
    assert beside, "nothing ran beside the timed tests"
    assert all(o["idle"] and o["pid"] not in {s["pid"] for s in timed.values()} for o in beside)
