"""The fuzzer at full size: thousands of damaged traces, scenario files and command lines.

Uses the strategies and the classification of ``tests/fuzz/harness.py`` (the CI test
runs a few dozen of the same cases) and prints the table:

    kind | cases | clean error | accepted, reported | unchanged/escaped | traceback | hang
    | silent wrong

A clean error is a one-line refusal naming the file, exit 2; "accepted, reported"
means the trace loads and every verb (terminal and JSON) names the damaged file or
rank; "unchanged" damage did not change what the trace holds. Every other outcome is
listed after the table with the case that produced it.

    python benchmarks/fuzz.py --traces 2000 --scenarios 200 --command-lines 200 --jobs 2
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import multiprocessing
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))  # multirank, for the real run the bases include


def _harness():
    """tests/fuzz/harness.py, loaded by path (this script's own name is fuzz)."""
    spec = importlib.util.spec_from_file_location("syncpace_fuzz_harness", TESTS / "fuzz" /
                                                  "harness.py")  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


h = _harness()

COLUMNS = ("refused", "reported", "unchanged", "traceback", "hang", "silent")


def _cell(outcome: h.Outcome) -> str:
    if outcome.kind != "clean":
        return outcome.kind
    return {"refused": "refused", "reported": "reported", "accepted": "reported"}.get(
        outcome.how, "unchanged"
    )


def worker(args: tuple[str, int, int, int, str]) -> tuple[dict, list]:
    kind, examples, seed_value, html_every, made = args
    work = Path(tempfile.mkdtemp(prefix="syncpace-fuzz-"))
    bases = {p.name: p for p in Path(made).iterdir()}  # made once, by the parent
    snapshots = {name: h._snapshot(root) for name, root in bases.items()}
    counts: collections.Counter = collections.Counter()
    bad: list = []
    n = [0]

    def record(case: object, outcome: h.Outcome) -> None:
        counts[_cell(outcome)] += 1
        if outcome.kind != "clean":
            bad.append((str(case)[:200], outcome.kind, outcome.detail[:300]))

    config = settings(
        max_examples=examples,
        phases=[Phase.generate],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    if kind == "traces":

        @seed(seed_value)
        @config
        @given(h.damages(bases))
        def run(damage: h.Damage) -> None:
            n[0] += 1
            html = html_every > 0 and n[0] % html_every == 0
            record(damage, h.run_trace_case(damage, bases, work, snapshots, html=html))

    elif kind == "scenarios":

        @seed(seed_value)
        @config
        @given(h.scenario_damages())
        def run(damage: h.ScenarioDamage) -> None:
            record(damage, h.run_scenario_case(damage, work))

    else:

        @seed(seed_value)
        @config
        @given(h.command_lines(bases["writer"]))
        def run(line: h.CommandLine) -> None:
            record(line, h.run_command_line(line, work))

    run()
    h._rmtree(work)
    return dict(counts), bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=2000, help="damaged trace cases")
    parser.add_argument("--scenarios", type=int, default=200, help="damaged scenario files")
    parser.add_argument("--command-lines", type=int, default=200, help="bad command lines")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--html-every",
        type=int,
        default=25,
        help="also render the HTML report every N trace cases (0: never; it takes about a second)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    plan = []
    for kind, total in (
        ("traces", args.traces),
        ("scenarios", args.scenarios),
        ("command lines", args.command_lines),
    ):
        per = -(-total // args.jobs) if total else 0
        for j in range(args.jobs if total else 0):
            count = min(per, total - j * per)
            if count > 0:
                plan.append((kind, (kind, count, args.seed * 1000 + j, args.html_every)))
    start = time.monotonic()
    made = Path(tempfile.mkdtemp(prefix="syncpace-fuzz-bases-"))
    h.base_traces(made)
    plan = [(kind, (*params, str(made))) for kind, params in plan]
    # An executor, not a Pool: a worker that dies (a crash in native code) ends the run
    # with an error instead of leaving the pool waiting for its task forever.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        results = list(pool.map(worker, [p[1] for p in plan]))
    h._rmtree(made)
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    problems: list = []
    for (kind, _), (counts, bad) in zip(plan, results, strict=True):
        table[kind].update(counts)
        problems += [(kind, *b) for b in bad]
    elapsed = time.monotonic() - start
    header = ("kind", "cases", "clean error", "accepted, reported", "unchanged/escaped",
              "traceback", "hang", "silent wrong")  # fmt: skip
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    total: collections.Counter = collections.Counter()
    for kind, counts in table.items():
        total.update(counts)
        print(_row(kind, counts))
    print(_row("all", total))
    print(f"\n{sum(total.values())} cases in {elapsed:.0f} s with {args.jobs} processes")
    for kind, case, outcome, detail in problems:
        print(f"{outcome}: [{kind}] {case}\n    {detail}")


def _row(kind: str, counts: collections.Counter) -> str:
    cells = [kind, str(sum(counts.values()))] + [str(counts.get(c, 0)) for c in COLUMNS]
    return " | ".join(cells)


if __name__ == "__main__":
    main()
