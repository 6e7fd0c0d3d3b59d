"""Faults and noise on a schedule: link rate changes, flaps, background flows,
CPU stragglers and killed ranks.

A fault is written ``ACTION TARGET [VALUE] [at=SECONDS] [for=SECONDS]``::

    rate leaf0-spine 20mbit at=5 for=10   # uplink slows to 20 Mbit/s from 5 s to 15 s
    flap h1-leaf0 at=4 for=2              # host link down at 4 s, up at 6 s
    flow h0->h2 at=0 for=30               # greedy TCP flow h0 → h2
    flow h1->h0 20mbit                    # UDP at a fixed 20 Mbit/s h1 → h0, whole run
    straggler h3 0.3 at=2                 # h3's processes capped at 30 % of one CPU
    kill rank=2 at=8                      # SIGKILL rank 2 (or: kill h2, the whole host)

or as ``[[fault]]`` tables of a spec file with the same keys (``action``, ``target``,
``value``, ``at``, ``for``). Times count from the start of the launchers. What a
fault changes is undone when its ``for`` ends, and at the end of the run anyway.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syncpace.errors import FabricError
from syncpace.fabric import bulk, cgroup, procs
from syncpace.fabric.backend import Backend
from syncpace.fabric.plan import link_state_plan, set_rate_plan
from syncpace.fabric.spec import parse_rate
from syncpace.fabric.topology import Fabric

ACTIONS = ("rate", "flap", "flow", "straggler", "kill")
DEFAULT_FLAP_S = 2.0


@dataclass(frozen=True, slots=True)
class Fault:
    action: str
    target: str
    value: str = ""
    at_s: float = 0.0
    for_s: float | None = None  # None: until the end of the run

    def __str__(self) -> str:
        parts = [self.action, self.target, self.value, f"at={self.at_s:g}"]
        if self.for_s is not None:
            parts.append(f"for={self.for_s:g}")
        return " ".join(p for p in parts if p)


def parse_fault(text: str) -> Fault:
    words = text.split()
    if len(words) < 2:
        raise FabricError(f"fault {text!r}: expected 'ACTION TARGET [VALUE] [at=S] [for=S]'")
    table: dict[str, Any] = {"action": words[0], "target": words[1]}
    for word in words[2:]:
        key, sep, value = word.partition("=")
        if sep and key in ("at", "for"):
            table[key] = value
        elif "value" not in table and not (sep and key != "rank"):
            table["value"] = word
        else:
            raise FabricError(f"fault {text!r}: unexpected {word!r}")
    return fault_from_table(table, text)


def fault_from_table(table: dict[str, Any], where: str = "") -> Fault:
    where = where or str(table)
    unknown = set(table) - {"action", "target", "value", "at", "for"}
    if unknown:
        raise FabricError(f"fault {where!r}: unknown keys {sorted(unknown)}")
    action = str(table.get("action", ""))
    if action not in ACTIONS:
        raise FabricError(
            f"fault {where!r}: unknown action {action!r}; one of {', '.join(ACTIONS)}"
        )
    if "target" not in table:
        raise FabricError(f"fault {where!r}: no target")

    def seconds(key: str) -> float | None:
        if key not in table:
            return None
        try:
            value = float(table[key])
        except (TypeError, ValueError) as exc:
            raise FabricError(
                f"fault {where!r}: {key} must be seconds, got {table[key]!r}"
            ) from exc
        if value < 0:
            raise FabricError(f"fault {where!r}: {key} must be >= 0")
        return value

    for_s = seconds("for")
    if action == "flap" and for_s is None:
        for_s = DEFAULT_FLAP_S
    fault = Fault(
        action, str(table["target"]), str(table.get("value", "")), seconds("at") or 0.0, for_s
    )
    _check_value(fault, where)
    return fault


def _check_value(fault: Fault, where: str) -> None:
    if fault.action == "rate" or (fault.action == "flow" and fault.value):
        parse_rate(fault.value, f"fault {where!r}")
    elif fault.action == "straggler":
        try:
            fraction = float(fault.value)
        except ValueError as exc:
            raise FabricError(
                f"fault {where!r}: straggler needs a CPU fraction, e.g. 'straggler h1 0.3'"
            ) from exc
        if not 0.01 <= fraction <= 64:
            raise FabricError(f"fault {where!r}: CPU fraction must be in 0.01..64")
    elif fault.value:
        raise FabricError(f"fault {where!r}: {fault.action} takes no value")
    if fault.action == "flow" and "->" not in fault.target:
        raise FabricError(f"fault {where!r}: a flow's target is SRC->DST, e.g. h0->h2")


def check_against(faults: list[Fault], fabric: Fabric) -> None:
    """Every target names something of this fabric."""
    hosts = {h.name for h in fabric.hosts}
    links = {link.name for link in fabric.links}
    for fault in faults:
        if fault.action in ("rate", "flap") and fault.target not in links:
            raise FabricError(f"fault '{fault}': no link {fault.target!r}; links: {sorted(links)}")
        if fault.action == "flow":
            for name in fault.target.split("->", 1):
                if name not in hosts:
                    raise FabricError(f"fault '{fault}': no host {name!r}; hosts: {sorted(hosts)}")
        if fault.action == "straggler" and fault.target not in hosts:
            raise FabricError(f"fault '{fault}': no host {fault.target!r}")
        if fault.action == "kill" and fault.target not in hosts:
            key, _, rank = fault.target.partition("=")
            if key != "rank" or not rank.isdigit():
                raise FabricError(f"fault '{fault}': kill a host (h2) or a rank (rank=3)")


@dataclass
class Context:
    """What faults act on during a run."""

    fabric: Fabric
    backend: Backend
    launcher_pids: Callable[[], list[int]]
    host_cgroups: dict[str, Path] = field(default_factory=dict)
    host_pids: Callable[[str], int | None] = lambda host: None
    run_seconds: float = 3600.0


@dataclass(order=True)
class _Event:
    t_s: float
    order: int
    phase: str = field(compare=False)  # "start" or "end"
    fault: Fault = field(compare=False)


class Scheduler:
    """Applies faults at their times in a background thread; logs each to JSON lines."""

    def __init__(self, faults: list[Fault], ctx: Context, log_path: Path) -> None:
        self.ctx = ctx
        self.log_path = log_path
        self.events: list[_Event] = []
        for i, fault in enumerate(faults):
            self.events.append(_Event(fault.at_s, 2 * i, "start", fault))
            if fault.for_s is not None and fault.action != "kill":
                self.events.append(_Event(fault.at_s + fault.for_s, 2 * i + 1, "end", fault))
        self.events.sort()
        self._active: list[Fault] = []
        self._flows: dict[Fault, bulk.Flow] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="syncpace-faults", daemon=True)
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread.start()

    def _loop(self) -> None:
        for event in self.events:
            if self._stop.wait(max(0.0, self._t0 + event.t_s - time.monotonic())):
                return
            self._apply(event.fault, event.phase)

    def stop(self) -> None:
        """Stop the schedule and undo whatever is still in force."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        for fault in list(self._active):
            self._apply(fault, "end")

    def _apply(self, fault: Fault, phase: str) -> None:
        record: dict[str, Any] = {
            "time_ns": time.time_ns(),
            "t_s": round(time.monotonic() - self._t0, 3),
            "phase": phase,
            "action": fault.action,
            "target": fault.target,
            "value": fault.value,
        }
        try:
            record["detail"] = self._do(fault, phase)
            # in effect once its commands returned: a loaded machine takes a while to
            # start them, and a step may still end between the two times
            record["applied_ns"] = time.time_ns()
            if phase == "start" and fault.action != "kill":
                self._active.append(fault)
            elif phase == "end" and fault in self._active:
                self._active.remove(fault)
        except Exception as exc:  # a fault that cannot be applied must not end the run
            record["error"] = str(exc)
            print(f"syncpace fabric: fault '{fault}' ({phase}) failed: {exc}", file=sys.stderr)
        with open(self.log_path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def _do(self, fault: Fault, phase: str) -> str:
        ctx, start = self.ctx, phase == "start"
        if fault.action == "rate":
            link = ctx.fabric.link(fault.target)
            rate = parse_rate(fault.value) if start else link.rate_bps
            _run_all(ctx.backend, set_rate_plan(ctx.fabric, link, rate))
            return f"rate {rate} bit/s"
        if fault.action == "flap":
            link = ctx.fabric.link(fault.target)
            _run_all(ctx.backend, link_state_plan(link, up=not start))
            return "link down" if start else "link up"
        if fault.action == "flow":
            return self._flow(fault, start)
        if fault.action == "straggler":
            path = ctx.host_cgroups[fault.target]
            cgroup.set_cpu_limit(path, float(fault.value) if start else None)
            return f"cpu limit {fault.value if start else 'lifted'}"
        return self._kill(fault)

    def _flow(self, fault: Fault, start: bool) -> str:
        if not start:
            flow = self._flows.pop(fault, None)
            if flow is not None:
                flow.stop()
            return "flow stopped"
        src, dst = fault.target.split("->", 1)
        seconds = fault.for_s if fault.for_s is not None else self.ctx.run_seconds
        port = bulk.BASE_PORT + 100 + len(self._flows)
        rate = parse_rate(fault.value) if fault.value else None
        (flow,) = bulk.start_flows(self.ctx.fabric, [(src, dst)], seconds + 1, port, rate)
        self._flows[fault] = flow
        kind = f"UDP at {rate} bit/s" if rate else "greedy TCP"
        return f"flow ({kind}) started on port {port}"

    def _kill(self, fault: Fault) -> str:
        if fault.target.startswith("rank="):
            rank = int(fault.target.split("=", 1)[1])
            pids = procs.find_rank(self.ctx.launcher_pids(), rank)
        else:
            pid = self.ctx.host_pids(fault.target)
            pids = [] if pid is None else [pid]
        if not pids:
            raise FabricError(f"no running process for {fault.target}")
        for pid in pids:
            procs.kill_tree(pid)
        return f"killed pids {pids}"


def _run_all(backend: Backend, commands: list) -> None:
    for command in commands:
        backend.run(command.argv)
