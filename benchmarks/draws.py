"""Planted causes drawn at random, run, diagnosed and scored against their reruns.

    python benchmarks/draws.py --set dev|test [--count 12] [--start 0]
                               [--where local,fabric] [--repeat 1]
                               [--out runs/draws] [--rescore] [--no-bench]

Each seed of the set (dev: 0-999, test: 1000 on; ``--start`` skips the first seeds)
is drawn (``tests/scenarios/draws.py``: the job's shape, one or two causes at a random
strength, or none), run as one job alternating clean and planted phases (on the
emulated fabric as root for ``fabric``), every phase diagnosed on its own, and kept in
``OUT/SET/draw-WHERE-SEED.json``. A draw whose file is there is not run again (failed
runs are); ``--rescore`` diagnoses the saved run directories again, running nothing;
``--repeat 2`` runs each draw twice (the stability score). Prints, per place and
together, the scores of every draw in ``OUT/SET`` (``tests/scenarios/drawscore.py``)
and writes them to ``OUT/SET/summary.json``. Fabric draws are diagnosed with the link
of an all-reduce benchmark on a fabric of the draw's own shape, one rank a host, as a
user benchmarks the fabric a job runs on (``--no-bench``: none).
Takes about half a minute a localhost draw on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "scenarios"))

import drawrun  # noqa: E402
import draws  # noqa: E402
import drawscore  # noqa: E402
import suite  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", choices=("dev", "test"), default="dev", dest="which")
    p.add_argument("--count", type=int, default=12, help="draws per place")
    p.add_argument("--start", type=int, default=0, help="seeds of the set to skip")
    p.add_argument("--where", default="local")
    p.add_argument("--repeat", type=int, default=1, help="runs of each draw")
    p.add_argument("--out", default="runs/draws")
    p.add_argument("--rescore", action="store_true")
    p.add_argument("--no-bench", action="store_true")
    args = p.parse_args(argv)
    console = Console(width=150)
    out = Path(args.out).resolve() / args.which
    out.mkdir(parents=True, exist_ok=True)
    places = [w for w in args.where.split(",") if w]
    if any(w not in ("local", "fabric") for w in places):
        console.print(f"--where: local and/or fabric, not {args.where!r}")
        return 2
    if "fabric" in places and os.geteuid() != 0 and not args.rescore:
        console.print("[yellow]not root: the fabric draws are skipped[/]")
        places.remove("fabric")
    try:
        chosen = [
            draws.draw(s, w)
            for w in places
            for s in draws.seeds(args.which, args.count, args.start)
        ]
    except ValueError as exc:
        console.print(str(exc))
        return 2
    if args.rescore:
        drawrun.rescore(out, chosen, log=console.print)
    else:
        _run(console, out, chosen, args)
    return _report(console, out)


def _run(console: Console, out: Path, chosen: list[draws.Draw], args: argparse.Namespace) -> None:
    todo = [d for d in chosen if not drawrun.is_done(out, d)]
    console.print(f"{len(chosen)} draws, {len(chosen) - len(todo)} done before, {len(todo)} to run")
    links = _links_file(out)
    with open(out / "jobs.log", "a") as log, Progress(console=console) as progress:
        task = progress.add_task(f"{args.which} draws", total=len(todo))
        for d in todo:
            t0 = time.monotonic()
            link = None if d.fabric is None or args.no_bench else _link(d, links, out, log, console)
            saved = drawrun.run_draw(d, out, args.repeat, link, log)
            marks = []
            for run in saved["runs"]:
                if run.get("error"):
                    marks.append(f"[red]failed: {run['error']}[/]")
                    continue
                top = drawscore.verdict(saved, run)
                marks.append(f"{top[0]} {list(top[1]) or ''}")
            progress.console.print(
                f"{d.name} ({time.monotonic() - t0:.0f} s) {d.describe()} -> {'; '.join(marks)}"
            )
            progress.advance(task)
    (out / "links.json").write_text(json.dumps({k: list(v) for k, v in links.items()}))


def _links_file(out: Path) -> dict[str, tuple[float, float]]:
    path = out / "links.json"
    if not path.is_file():
        return {}
    try:
        return {k: (float(v[0]), float(v[1])) for k, v in json.loads(path.read_text()).items()}
    except (ValueError, TypeError, IndexError) as exc:
        raise SystemExit(f"{path}: not a links file ({exc})") from None


def _link(d: draws.Draw, links: dict, out: Path, log, console: Console) -> tuple[float, float]:  # noqa: ANN001
    assert d.fabric is not None
    key = suite.fabric_key(d.fabric)
    if key not in links:
        console.print(f"benchmark: all-reduce on the draw's fabric, {key}")
        links[key] = suite.bench_link(d.fabric, out / f"bench-{key}", log)
        (out / "links.json").write_text(json.dumps({k: list(v) for k, v in links.items()}))
    return links[key]


def _report(console: Console, out: Path) -> int:
    records = []
    for path in sorted(out.glob("draw-*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except ValueError as exc:
            console.print(f"{path}: not JSON ({exc})")
            return 2
    if not records:
        console.print(f"{out}: no draws yet")
        return 0
    summaries = {}
    for where in ("local", "fabric"):
        part = [r for r in records if r["draw"]["where"] == where]
        if part:
            summaries[where] = drawscore.summarize(part)
    if len(summaries) > 1:
        summaries["all"] = drawscore.summarize(records)
    for where, s in summaries.items():
        console.rule(f"{out.name}: {where}")
        console.print(drawscore.summary_text(s), markup=False, highlight=False)
    (out / "summary.json").write_text(json.dumps(summaries, indent=1, default=str))
    console.print(f"{out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
