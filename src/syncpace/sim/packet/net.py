"""Packet tier: each collective's transfers through ns-3 (real TCP, queues, delayed ACKs).

:class:`PacketNetwork` answers what the flow tier's network answers, "how long does this
collective take", by running the compiled driver (:mod:`syncpace.sim.packet.build`) on
the topology's network (:mod:`.fabric`) with the plan's transfers (:mod:`.transfers`);
everything around it (the iteration loop, noise, the pacer, traces) is the engine's.

A collective of the same plan (op, algorithm, size) and the same routes takes the same
time on the same idle network, so each is simulated once and remembered; under
``ecmp = "per_collective"`` every collective has routes of its own and runs apart.
Persistent flows between the job's nodes (``background_flows``) run from the start of
each ns-3 run: a greedy one as a TCP connection that always has data, a fixed-rate
one as UDP datagrams at its share of the NIC rate. The job's transfers begin 1 s after
them plus a random offset of up to 2 s (seeded), and each plan is run
``packet_samples`` times at different offsets: every collective draws one of them,
which gives TCP's spread under contention. Without such flows a run is
deterministic and runs once.

An ns-3 run is a function of its input (the driver seeds nothing from the clock), so
its result is also remembered per process by that input: a study's paced and unpaced
arms of one scale, or a benchmark's repeated configuration, run ns-3 once.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from syncpace.errors import ConfigError
from syncpace.sim.collectives import Plan
from syncpace.sim.network import NetworkSpec
from syncpace.sim.packet import build
from syncpace.sim.packet.fabric import Fabric, address, dotted
from syncpace.sim.packet.fabric import build as build_fabric
from syncpace.sim.packet.transfers import Transfers, expand, spines_of
from syncpace.sim.topology import GB, Topology

TCP_NAMES = {"newreno": "TcpNewReno", "cubic": "TcpCubic", "bbr": "TcpBbr"}
#: Linux's shortest delayed-ACK timer and retransmission timeout floor.
DELACK_TIMEOUT_S = 0.04
MIN_RTO_S = 0.2
#: Socket buffers: Linux's largest default (net.ipv4.tcp_rmem's third field).
BUFFER_BYTES = 6 << 20
HEADERS = 52  # IPv4 + TCP with timestamps: what an MTU carries beside a segment
STOP_S = 3600.0  # simulated time after which a run gives up
HANDSHAKE_S = 0.01  # connections open before the job's first transfer
REMEMBERED = 256  # ns-3 results kept per process, the least recently used dropped first
STEP = ("step",)  # the key of the step's durations among the per-plan ones

_results: OrderedDict[str, dict] = OrderedDict()
_results_lock = threading.Lock()


def forget() -> None:
    """Drop the remembered ns-3 results (the benchmarks time runs from cold)."""
    with _results_lock:
        _results.clear()


class PacketNetwork:
    def __init__(
        self,
        topo: Topology,
        spec: NetworkSpec,
        seed: int,
        idle_s: float = 0.0,
        step: list[Plan] | None = None,
    ) -> None:
        """``idle_s``: how long the connections rest between two steps (a step's
        compute), before each of the ``packet_warm`` steps and the measured one.
        ``step``: the collectives one step issues, in order; :meth:`run` with their
        ``index`` then times each as the step runs them, back to back on the same
        connections and queues (the second of two buckets finds the shaper's bucket
        drained by the first); without it each collective runs alone."""
        self.topo, self.spec, self.idle_s = topo, spec, idle_s
        self.step = step
        self.program = build.driver()
        self.fabric: Fabric = build_fabric(
            topo, spec.packet_queue_ms, spec.background_load, spec.packet_shaper, spec.packet_mtu
        )
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 707]))
        self._flows = spec.host_flows()
        self._cache: dict[tuple, np.ndarray] = {}
        self._row = 0  # the sample the current step drew
        self.runs = 0  # ns-3 runs so far (remembered results included)
        self.executed = 0  # of which ns-3 actually ran
        self.drops = 0  # packets the queues dropped in them

    def run(self, plan: Plan, start_s: float, salt: int, index: int = -1) -> float:
        """Duration of ``plan`` (seconds), the ``index``-th collective of the step given
        at construction (-1: alone); ``start_s`` does not matter on a network whose only
        other traffic is persistent. Under ``ecmp = "per_collective"`` every collective
        runs alone, on routes of its own."""
        per_collective = self.topo.spec.ecmp == "per_collective"
        salt = salt if per_collective else 0
        if self.step is None or per_collective or not 0 <= index < len(self.step):
            key: tuple = (plan.op, plan.algorithm, plan.nbytes, salt)
            if key not in self._cache:
                self._cache[key] = self.durations(plan, salt)
            samples = self._cache[key]
            return float(
                samples[self.rng.integers(samples.size)] if samples.size > 1 else samples[0]
            )
        if STEP not in self._cache:
            self._cache[STEP] = self.sequence(self.step)
        table = self._cache[STEP]
        if index == 0 and table.shape[0] > 1:
            self._row = int(self.rng.integers(table.shape[0]))
        return float(table[self._row if table.shape[0] > 1 else 0, index])

    def durations(self, plan: Plan, salt: int = 0) -> np.ndarray:
        """Each sample's duration of ``plan`` run alone: from its first transfer's start
        to its last transfer's end."""
        if not plan.phases:
            return np.zeros(1)
        return self.sequence([plan], salt)[:, 0]

    def sequence(self, plans: list[Plan], salt: int = 0) -> np.ndarray:
        """Each sample's (rows) duration of each of ``plans`` (columns) run back to back
        as a step runs them, after ``packet_warm`` such steps, each step ``idle_s`` after
        the one before: the connections and queues carry their state from one to the
        next."""
        if not any(p.phases for p in plans):
            return np.zeros((1, len(plans)))
        out, measured = self.step_transfers(plans, salt)
        self.add_host_flows(out)
        offsets = self.offsets()
        results = self._run_all([self.describe(out, w) for w in offsets])
        return np.array(
            [
                [max(r["done"][i] for i in ends) - r["done"][b] for b, ends in measured]
                for r in results
            ]
        )

    def step_transfers(
        self, plans: list[Plan], salt: int = 0
    ) -> tuple[Transfers, list[tuple[int, list[int]]]]:
        """The job's transfers :meth:`sequence` runs: the warm steps and the measured one,
        and per plan of the measured step (its start, its ends)."""
        out = Transfers()
        last: list[int] = []
        measured: list[tuple[int, list[int]]] = []
        for k in range(self.spec.packet_warm + 1):
            if k:
                last = [out.add(0, 0, self.idle_s, last)]
            measured = []
            for p in plans:
                begin = out.add(0, 0, 0.0, last)  # the collective's start: its end
                last = expand(p, self.topo, self.spec, salt, out, after=[begin])
                measured.append((begin, last))
        return out, measured

    def transfer_times(self, out: Transfers, warm_s: float = HANDSHAKE_S) -> list[float]:
        """Each transfer's end (seconds after the job's start) in one run: the tests'
        and the benchmark's direct use of the driver."""
        self.add_host_flows(out)
        return list(self._run_all([self.describe(out, warm_s)])[0]["done"])

    def statistics(self, out: Transfers, warm_s: float = HANDSHAKE_S, hystart: bool = True) -> dict:
        """One run of ``out`` (host flows added) with the driver's statistics: ``done``
        and ``start`` per transfer (seconds after the job's start); per connection
        (``out``'s ids) ``[retransmissions, timeouts, fast recoveries, largest cwnd
        bytes, last ssthresh bytes, largest smoothed RTT s]``; per link direction
        (``2 x link + end``, the fabric's links in order) ``[drops, fullest queue
        bytes]``. ``hystart=False`` turns cubic's hybrid slow start off (ns-3 and Linux
        have it on), to see what it costs."""
        # a copy: the caller may run the same transfers again (another offset)
        out = replace(out, conns=dict(out.conns), xfers=list(out.xfers), extra=list(out.extra))
        self.add_host_flows(out)
        return self._execute(self.describe(out, warm_s, stats=True, hystart=hystart))

    def offsets(self) -> list[float]:
        """The warm-up times (simulated seconds of the host flows before the job) of
        the samples :meth:`sequence` runs; each call draws new ones."""
        if not self._flows:
            return [HANDSHAKE_S]
        # a loss-based TCP's window saws up and down for as long as it runs: the
        # offsets spread over seconds, after its first slow start, to draw from all of it
        # (packet_settle_s and packet_span_s: each simulated second of a greedy flow costs
        # its rate in segments, so shorter ones trade that spread for speed)
        s = self.spec
        draws = s.packet_settle_s + self.rng.uniform(0, s.packet_span_s, s.packet_samples)
        return list(np.maximum(draws, HANDSHAKE_S))

    def describe(
        self, out: Transfers, warm_s: float, stats: bool = False, hystart: bool = True
    ) -> str:
        """The driver's input; with ``stats`` it also reports each transfer's start and
        TCP's repairs and drops (``benchmarks/packet_breakdown.py`` reads them)."""
        s = self.spec
        segment = s.packet_mtu - HEADERS
        lines = [
            f"tcp {TCP_NAMES[s.packet_tcp]}",
            f"delack {s.packet_delayed_ack} {DELACK_TIMEOUT_S}",
            f"segment {segment}",
            f"buffer {BUFFER_BYTES}",
            f"minrto {MIN_RTO_S}",
            f"warm {warm_s:.9g}",
            f"stop {STOP_S}",
            *(["stats"] if stats else []),
            *([] if hystart else ["hystart 0"]),
            *self.fabric.lines(),
        ]
        lines += out.conn_lines() + out.extra + out.xfers + ["end"]
        return "\n".join(lines) + "\n"

    def add_host_flows(self, out: Transfers) -> None:
        """``background_flows`` into ``out``: from node SRC's rank ``SRC x G`` to node
        DST's, on the spine the topology's hash (salt 0) gives the pair."""
        g = self.topo.spec.gpus_per_node
        lines = out.extra
        nic_bps = self.topo.spec.nic_gbps * GB * 8
        for f in self._flows:
            src, dst = f.src * g, f.dst * g
            hashes = self.topo.flow_hash(np.array([src]), np.array([dst]), 0)
            sp = int(spines_of(self.topo, np.array([src]), np.array([dst]), hashes)[0])
            if f.share is None:
                # a connection of its own, apart from any the job's transfers use
                lines.append(f"greedy {out.conn(src, dst, sp, 'greedy')}")
            else:
                lines.append(
                    f"udp {src} {dst} {dotted(int(address(src, sp)))} "
                    f"{dotted(int(address(dst, sp)))} {f.share * nic_bps:.0f}"
                )

    def _run_all(self, inputs: list[str]) -> list[dict]:
        workers = max(1, min(len(inputs), os.cpu_count() or 1))
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(self._run_one, inputs))
        self.runs += len(results)
        self.drops += sum(int(r["drops"]) for r in results)
        return results

    def _run_one(self, text: str) -> dict:
        key = hashlib.sha256(f"{self.program}\0{text}".encode()).hexdigest()
        with _results_lock:
            if key in _results:
                _results.move_to_end(key)
                return _results[key]
        result = self._execute(text)
        with _results_lock:
            self.executed += 1
            _results[key] = result
            while len(_results) > REMEMBERED:
                _results.popitem(last=False)
        return result

    def _execute(self, text: str) -> dict:
        done = subprocess.run(
            [str(self.program)], input=text, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise ConfigError(f"--tier packet: the ns-3 run failed: {last[:300]}")
        result = json.loads(done.stdout)
        if result["unfinished"]:
            raise ConfigError(
                f"--tier packet: {result['unfinished']} transfers did not end within "
                f"{STOP_S:g} simulated seconds"
            )
        return result
