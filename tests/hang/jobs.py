"""Drive the planted-hang jobs of ``workers/scenario.py`` and collect what they leave.

A :class:`Job` runs 4 real gloo ranks (forked by ``workers/zygote.py`` from one process
that imported torch, so a job pays one torch import) with a short process-group
timeout. While the job hangs, the driver waits (bounded, polling the run directory)
for the stall records the scenario must produce and the Flight Recorder dumps the
ranks write then, diagnoses the live directory, and plays the scheduler where the
scenario says so (SIGKILL a sleeping rank, or one it froze with SIGSTOP). Then every
rank is joined with a timeout and its exit code and last error line kept. Several
jobs run at once (they mostly wait), a few at a time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multirank import free_port, rank_env, record_restart
from syncpace.analysis import find_hang
from syncpace.errors import TraceError
from syncpace.trace import load_trace
from syncpace.trace.stall import load_stalls

WORKER = Path(__file__).parent / "workers" / "scenario.py"
ZYGOTE = Path(__file__).parent / "workers" / "zygote.py"
SOURCE = WORKER.read_text(encoding="utf-8")
WORLD = 4
CULPRIT = 3
BOUND_S = 180.0
#: A job whose rendezvous fails (gloo's connectFullMesh, on a heavily loaded machine)
#: never reached what it tests: it is started again, at most this many times in all.
ATTEMPTS = 3


class RendezvousFailed(Exception):
    pass


def constants() -> dict[str, int]:
    """STEPS, CALLS and STEP of the worker, read from its source (the job's code)."""
    m = re.search(r"^STEPS, CALLS, STEP = (\d+), (\d+), (\d+)$", SOURCE, re.MULTILINE)
    assert m, "the worker's STEPS, CALLS, STEP line changed"
    return dict(zip(("STEPS", "CALLS", "STEP"), map(int, m.groups()), strict=True))


def line_of(marker: str) -> int:
    """The line of the worker that carries ``# LINE:marker``."""
    for i, line in enumerate(SOURCE.splitlines(), 1):
        if line.rstrip().endswith(f"# LINE:{marker}"):
            return i
    raise AssertionError(f"no line marked {marker}")


@dataclass
class Rank:
    rank: int
    returncode: int
    stdout: str
    stderr: str

    @property
    def error(self) -> str:
        """The last ``Type: message`` line the rank printed (its own error)."""
        lines = [ln for ln in self.stderr.splitlines() if re.search(r"\w+(Error|Exception)", ln)]
        return lines[-1] if lines else ""


@dataclass
class Job:
    mode: str
    out: Path
    traced: bool = True
    fr: bool = False
    pg_timeout: float = 3.0
    ranks: list[Rank] = field(default_factory=list)
    live: dict[str, Any] = field(default_factory=dict)
    live_culprit_alive: bool = False
    fr_dir: Path | None = None
    seconds: float = 0.0
    attempts: int = 0

    @property
    def trace_dir(self) -> Path:
        return self.out / "trace"

    @property
    def rank_dir(self) -> Path:
        return self.out / "ranks"

    def run(self) -> Job:
        base = self.out
        for attempt in range(1, ATTEMPTS + 1):
            self.out, self.attempts = base / f"attempt{attempt}", attempt
            try:
                return self._run()
            except RendezvousFailed as exc:
                if attempt == ATTEMPTS:
                    raise
                record_restart(f"hang job {self.mode}", attempt, str(exc))
        raise AssertionError("unreachable")

    def _run(self) -> Job:
        ready = self.out / "ready"
        ready.mkdir(parents=True)
        self.rank_dir.mkdir()
        env = {"READY_DIR": str(ready), "PG_TIMEOUT": str(self.pg_timeout), "CULPRIT": str(CULPRIT)}
        if self.traced:
            env["TRACE_DIR"] = str(self.trace_dir)
        if self.fr:
            self.fr_dir = self.out / "fr"
            self.fr_dir.mkdir()
            env.update(FR_DIR=str(self.fr_dir), TORCH_FR_BUFFER_SIZE="200")
        start = time.monotonic()
        command = [sys.executable, str(ZYGOTE), str(WORLD), str(self.rank_dir), str(WORKER)]
        with (self.out / "zygote.err").open("w") as err:
            zygote = subprocess.Popen(
                [*command, self.mode],
                env=rank_env(0, WORLD, free_port(), env),
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
            pids: dict[int, int] = {}
            try:
                pids_file = self.rank_dir / "pids.json"
                self._wait("rank processes", pids_file.exists, zygote)
                pids = {int(r): p for r, p in json.loads(pids_file.read_text()).items()}
                self._drive(pids, zygote)
                self._join(pids, zygote)
            finally:
                for rank, pid in pids.items():
                    if not (self.rank_dir / f"rank{rank}.code").exists():
                        _kill(pid)
                zygote.wait(timeout=BOUND_S)
        self.seconds = time.monotonic() - start
        self.ranks = [self._result(r) for r in range(WORLD)]
        return self

    # While the job runs ----------------------------------------------------------------
    def _ended(self, rank: int) -> bool:
        if not (self.rank_dir / f"rank{rank}.code").exists():
            return False
        out = (self.rank_dir / f"rank{rank}.out").read_text(errors="replace")
        if "INIT_DONE" not in out:
            raise RendezvousFailed(f"{self.mode}: rank {rank} ended before the job began")
        return True

    def _alive(self, rank: int) -> bool:
        return not self._ended(rank)

    def _wait(self, what: str, condition: Any, zygote: subprocess.Popen) -> None:
        deadline = time.monotonic() + BOUND_S
        while not condition():
            for rank in range(WORLD):
                self._ended(rank)  # raises if the rendezvous failed
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.mode}: no {what} within {BOUND_S}s")
            if zygote.poll() is not None:
                raise AssertionError(f"{self.mode}: the job ended before {what}")
            time.sleep(0.05)

    def _stalls(self, ranks: range | list[int]) -> bool:
        records, _ = load_stalls(self.trace_dir)
        return set(ranks) <= set(records)

    def _drive(self, pids: dict[int, int], zygote: subprocess.Popen) -> None:
        if not self.traced or self.mode in ("healthy", "size", "skip"):
            return
        everyone = range(WORLD)
        others = [r for r in everyone if r != CULPRIT]
        wanted = {"sleep": everyone, "op": everyone, "kill": [CULPRIT], "freeze": others}
        self._wait("stall records", lambda: self._stalls(wanted[self.mode]), zygote)
        if self.fr_dir is not None:  # each rank dumps once its own stall record is written
            fr_dir = self.fr_dir
            dumped = [fr_dir / f"fr_trace_rank_{r}" for r in wanted[self.mode]]
            self._wait("Flight Recorder dumps", lambda: all(p.exists() for p in dumped), zygote)
        if self.mode in ("sleep", "freeze"):
            self._diagnose_live(zygote)
        if self.mode in ("kill", "freeze"):
            _kill(pids[CULPRIT])

    def _diagnose_live(self, zygote: subprocess.Popen) -> None:
        deadline = time.monotonic() + BOUND_S
        while True:  # a rank may be rewriting its files: read again
            try:
                analysis, finding = find_hang(load_trace(self.trace_dir))
                break
            except TraceError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.live_culprit_alive = self._alive(CULPRIT)
        self.live = {"finding": finding, "analysis": analysis}

    def _join(self, pids: dict[int, int], zygote: subprocess.Popen) -> None:
        others = [r for r in range(WORLD) if not (self.mode == "sleep" and r == CULPRIT)]
        self._wait("the end of the job", lambda: all(self._ended(r) for r in others), zygote)
        if self.mode == "sleep":  # it sleeps for an hour: kill it, like a scheduler would
            _kill(pids[CULPRIT])
        zygote.wait(timeout=BOUND_S)

    def _result(self, rank: int) -> Rank:
        code = self.rank_dir / f"rank{rank}.code"
        return Rank(
            rank,
            int(code.read_text()) if code.exists() else -999,
            (self.rank_dir / f"rank{rank}.out").read_text(errors="replace"),
            (self.rank_dir / f"rank{rank}.err").read_text(errors="replace"),
        )


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
