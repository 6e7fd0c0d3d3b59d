"""The suite's schedule with ``-n`` (tests/suiteschedule.py): files without an ``alone``
test spread over the workers first, then the ``alone`` ones on one worker with no other
test running. Driven here as xdist drives it, with workers that behave as xdist's do
(each runs its tests in order and holds its last one until it knows the next, or until
it is shut down), and once for real, by pytest itself."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from suiteschedule import AloneLastScheduling


class Worker:
    """What the scheduler sees of an xdist worker, and what the worker does."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
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


def drive(files: dict[str, int], alone: set[str], workers: int = 2, seed: int = 0):
    """Run a collection of ``files`` (name: number of tests) to the end; returns each
    step's running tests, in order: ``[(worker, nodeid, alone tests running elsewhere)]``."""
    import random

    rng = random.Random(seed)
    collection = [f"{f}::test_{i}" for f, n in files.items() for i in range(n)]
    alone_ids = {nid for nid in collection if nid.split("::")[0] in alone}
    sched = AloneLastScheduling(_config(workers), alone=lambda: alone_ids)
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, collection)
    sched.schedule()
    ran = []
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
        index = node.queue.pop(0)
        others = [collection[n.queue[0]] for n in nodes if n is not node and n.queue]
        ran.append((node.gateway.id, collection[index], others))
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
ALONE = {"tests/d_root.py", "tests/f_ranks.py"}


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("workers", [2, 3])
def test_every_test_runs_once_and_alone_tests_run_with_nothing_beside_them(seed, workers):
    ran = drive(FILES, ALONE, workers, seed)
    nodeids = [nid for _, nid, _ in ran]
    assert sorted(nodeids) == sorted(f"{f}::test_{i}" for f, n in FILES.items() for i in range(n))
    first_alone = min(i for i, (_, nid, _) in enumerate(ran) if nid.split("::")[0] in ALONE)
    # every shared test came before the first alone one ...
    assert all(nid.split("::")[0] not in ALONE for _, nid, _ in ran[:first_alone])
    # ... and no test of another worker was waiting to run once the alone ones began
    alone_part = ran[first_alone:]
    assert all(nid.split("::")[0] in ALONE for _, nid, _ in alone_part)
    assert len({worker for worker, _, _ in alone_part}) == 1
    assert all(not others for _, _, others in alone_part)
    # the shared files were spread over the workers, a file to one worker
    shared = {}
    for worker, nid, _ in ran[:first_alone]:
        shared.setdefault(nid.split("::")[0], set()).add(worker)
    assert all(len(w) == 1 for w in shared.values())
    assert len(set().union(*shared.values())) > 1


def test_only_alone_tests_or_none_at_all():
    ran = drive({"tests/d_root.py": 3, "tests/f_ranks.py": 2}, ALONE)
    assert len({worker for worker, _, _ in ran}) == 1 and len(ran) == 5
    ran = drive({"tests/a.py": 3, "tests/b.py": 2}, set())
    assert len(ran) == 5


@pytest.mark.slow
def test_pytest_with_two_workers_runs_alone_tests_by_themselves(tmp_path, pytestconfig):
    """The real thing: pytest -n 2 on a small suite whose tests log when they start and
    end. No other test overlaps an alone one (marked by hand and by the multirank mark
    that conftest turns into alone)."""
    log = tmp_path / "log.jsonl"
    suite = tmp_path / "suite"
    suite.mkdir()
    body = textwrap.dedent(
        f"""
        import json, time, pytest
        def _log(name, what):
            with open({str(log)!r}, "a") as f:
                f.write(json.dumps([name, what, time.monotonic()]) + "\\n")
        """
    )
    for name, mark in [("a", ""), ("b", ""), ("c", "alone"), ("d", "multirank"), ("e", "")]:
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
        "[pytest]\nmarkers =\n    alone: x\n    multirank: x\n    slow: x\n    root: x\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", str(suite)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=suite,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "15 passed" in done.stdout
    events = [json.loads(line) for line in log.read_text().splitlines()]
    spans = {}
    for name, what, t in events:
        spans.setdefault(name, {})[what] = t
    alone = {n: s for n, s in spans.items() if n[0] in "cd"}
    shared = {n: s for n, s in spans.items() if n[0] not in "cd"}
    assert len(alone) == 6 and len(shared) == 9
    for name, span in alone.items():
        for other, o in spans.items():
            if other != name:
                assert o["end"] <= span["start"] or o["start"] >= span["end"], (name, other)
    # the shared ones did run side by side
    assert any(
        o["start"] < s["end"] and s["start"] < o["end"]
        for n, s in shared.items()
        for m, o in shared.items()
        if n < m
    )
