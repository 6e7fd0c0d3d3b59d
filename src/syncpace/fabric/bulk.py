"""Bulk flows between hosts: background contention, and throughput checks.

Two kinds: a *greedy* TCP flow takes whatever share TCP wins in the shaped queues
(it varies from run to run: TCP through one tbf FIFO is not fair), and a *fixed-rate*
UDP flow sends at a set bit rate and never backs off, so the capacity it leaves is
known in advance (what a test or a model can rely on). ``python -m
syncpace.fabric.bulk recv|send`` is what runs inside a host namespace;
:func:`start_flows` and :func:`measure` drive it from outside. Every socket wait and
every process is bounded in time.
"""

from __future__ import annotations

import argparse
import errno
import json
import selectors
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from syncpace.errors import FabricError
from syncpace.fabric.topology import Fabric, Host

BASE_PORT = 5201
CHUNK = 1 << 16
#: UDP payload: with the IP and UDP headers (28 bytes) one frame under a 1,500-byte MTU.
DATAGRAM = 1400
#: The fixed-rate sender sleeps when it is this far ahead of its schedule: bursts stay
#: a few frames long, well inside a tbf bucket.
PACE_S = 0.002
#: At most this much of a late schedule is caught up in one burst.
CATCH_UP_S = 0.02
#: A UDP receiver ends when nothing arrived for this long (end markers can be dropped).
UDP_IDLE_S = 1.0
END = b"syncpace-bulk-end"


@dataclass(frozen=True, slots=True)
class FlowResult:
    src: str
    dst: str
    bytes: int
    seconds: float

    @property
    def bps(self) -> float:
        return self.bytes * 8 / self.seconds if self.seconds > 0 else 0.0


def _recv(port: int, timeout_s: float) -> int:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(1)
    server.settimeout(timeout_s)
    print("ready", flush=True)
    conn, _ = server.accept()
    conn.settimeout(timeout_s)
    total, first, last = 0, 0.0, 0.0
    buf = bytearray(1 << 20)
    try:
        while True:
            n = conn.recv_into(buf)
            if n == 0:
                break
            last = time.monotonic()
            if total == 0:
                first = last
            total += n
    except (TimeoutError, ConnectionError):
        pass  # a flapped or killed sender: report what arrived
    print(json.dumps({"bytes": total, "seconds": last - first}), flush=True)
    return 0


def _recv_udp(port: int, timeout_s: float) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port))
    sock.settimeout(timeout_s)
    print("ready", flush=True)
    total, first, last = 0, 0.0, 0.0
    buf = bytearray(1 << 16)
    try:
        while True:
            n = sock.recv_into(buf)
            if buf[:n] == END:
                break
            last = time.monotonic()
            if total == 0:
                first = last
                sock.settimeout(UDP_IDLE_S)
            total += n
    except TimeoutError:
        pass  # the sender ended and its markers were dropped, or it never came
    print(json.dumps({"bytes": total, "seconds": last - first}), flush=True)
    return 0


def _announce(announce: bool) -> None:
    """Say on stdout that sending begins, for a caller that waits for it."""
    if announce:
        print("sending", flush=True)


def _send_udp(
    address: str, port: int, seconds: float, rate_bps: int, announce: bool = False
) -> int:
    """Datagrams at ``rate_bps`` (payload bits) for ``seconds``, paced against the clock
    so a short late wake-up is caught up at once and the mean rate holds."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _announce(announce)
    payload = b"\0" * DATAGRAM
    target = (address, port)
    start = time.monotonic()
    end = start + seconds
    sent = 0
    while (now := time.monotonic()) < end:
        ahead = start + sent * 8 / rate_bps - now
        if ahead > PACE_S:
            time.sleep(ahead)
            continue
        if ahead < -CATCH_UP_S:  # descheduled for long: skip, rather than burst it all
            sent = int((now - start - CATCH_UP_S) * rate_bps / 8)
        try:
            sock.sendto(payload, target)
        except OSError as exc:
            # a full local queue or an ICMP error from a peer not yet bound: a
            # fixed-rate source drops the datagram and keeps its schedule
            if exc.errno not in (errno.ENOBUFS, errno.ECONNREFUSED, errno.EAGAIN):
                return 1
        sent += DATAGRAM
    for _ in range(5):
        try:
            sock.sendto(END, target)
        except OSError:
            pass
        time.sleep(0.01)
    sock.close()
    return 0


def _send(
    address: str, port: int, seconds: float, connect_timeout_s: float, announce: bool = False
) -> int:
    deadline = time.monotonic() + connect_timeout_s
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=connect_timeout_s)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    payload = b"\0" * CHUNK
    _announce(announce)
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
    except (TimeoutError, ConnectionError):
        return 1
    finally:
        conn.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m syncpace.fabric.bulk")
    sub = parser.add_subparsers(dest="mode", required=True)
    recv = sub.add_parser("recv")
    recv.add_argument("--port", type=int, default=BASE_PORT)
    recv.add_argument("--timeout", type=float, default=10.0)
    recv.add_argument("--udp", action="store_true")
    send = sub.add_parser("send")
    send.add_argument("--to", required=True)
    send.add_argument("--port", type=int, default=BASE_PORT)
    send.add_argument("--seconds", type=float, default=2.0)
    send.add_argument("--connect-timeout", type=float, default=5.0)
    send.add_argument("--rate", type=int, default=0, help="bit/s: a fixed-rate UDP flow")
    send.add_argument("--announce", action="store_true", help="print 'sending' when it begins")
    args = parser.parse_args(argv)
    if args.mode == "recv":
        return (_recv_udp if args.udp else _recv)(args.port, args.timeout)
    if args.rate > 0:
        return _send_udp(args.to, args.port, args.seconds, args.rate, args.announce)
    return _send(args.to, args.port, args.seconds, args.connect_timeout, args.announce)


def in_namespace(namespace: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", namespace, sys.executable, "-m", "syncpace.fabric.bulk", *argv]


@dataclass
class Flow:
    """A running sender→receiver pair; ``result()`` waits for it within a bound."""

    src: str
    dst: str
    receiver: subprocess.Popen
    sender: subprocess.Popen
    seconds: float

    def result(self, timeout_s: float | None = None) -> FlowResult:
        timeout_s = self.seconds + 15 if timeout_s is None else timeout_s
        try:
            out, _ = self.receiver.communicate(timeout=timeout_s)
            self.sender.wait(timeout=5)
        except subprocess.TimeoutExpired as exc:
            self.stop()
            raise FabricError(
                f"flow {self.src}->{self.dst} did not end within {timeout_s:g} s"
            ) from exc
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if self.receiver.returncode != 0 or not lines:
            raise FabricError(f"flow {self.src}->{self.dst}: receiver failed: {out.strip()!r}")
        data = json.loads(lines[-1])
        return FlowResult(self.src, self.dst, int(data["bytes"]), float(data["seconds"]))

    def stop(self) -> None:
        for proc in (self.sender, self.receiver):
            _end(proc)


def start_flows(
    fabric: Fabric,
    pairs: list[tuple[str, str]],
    seconds: float,
    base_port: int = BASE_PORT,
    rate_bps: int | None = None,
    sending: bool = False,
) -> list[Flow]:
    """Start flows ``src -> dst`` for ``seconds``: greedy TCP, or UDP at ``rate_bps``
    each when it is given. Every receiver first, then every sender, so concurrent
    flows really start together. ``sending``: return only once every sender says it
    is sending (each starts a Python in its namespace: about half a second on a loaded
    machine, which a caller planting the flow for a phase of a job must wait out)."""
    if rate_bps is not None and rate_bps <= 0:
        raise FabricError(f"a fixed-rate flow needs a rate > 0 bit/s, got {rate_bps}")
    udp = ["--udp"] if rate_bps else []
    receivers: list[subprocess.Popen] = []
    flows: list[Flow] = []
    try:
        hosts = [(_host(fabric, src), _host(fabric, dst)) for src, dst in pairs]
        for k, (_, target) in enumerate(hosts):
            port = str(base_port + k)
            receivers.append(
                subprocess.Popen(
                    in_namespace(target.namespace, "recv", "--port", port, "--timeout", "10", *udp),
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for (src, dst), receiver in zip(pairs, receivers, strict=True):
            if not _wait_ready(receiver, 10.0):
                raise FabricError(f"flow {src}->{dst}: the receiver did not start")
        for k, ((source, target), receiver) in enumerate(zip(hosts, receivers, strict=True)):
            argv = ["send", "--to", target.address, "--port", str(base_port + k)]
            if rate_bps:
                argv += ["--rate", str(rate_bps)]
            if sending:
                argv += ["--announce"]
            sender = subprocess.Popen(
                in_namespace(source.namespace, *argv, "--seconds", f"{seconds:g}"),
                stdout=subprocess.PIPE if sending else None,
                text=True,
            )
            flows.append(Flow(source.name, target.name, receiver, sender, seconds))
        for flow in flows if sending else []:
            if not _wait_ready(flow.sender, 10.0, "sending"):
                raise FabricError(f"flow {flow.src}->{flow.dst}: the sender did not start")
        return flows
    except BaseException:
        for proc in [*receivers, *(flow.sender for flow in flows)]:
            _end(proc)
        raise


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=5)
    if proc.stdout is not None:
        proc.stdout.close()


def _host(fabric: Fabric, name: str) -> Host:
    try:
        return fabric.host(name)
    except KeyError:
        hosts = ", ".join(h.name for h in fabric.hosts)
        raise FabricError(f"unknown host {name!r}; hosts: {hosts}") from None


def _wait_ready(proc: subprocess.Popen, timeout_s: float, word: str = "ready") -> bool:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            return False
    return proc.stdout.readline().strip() == word


def measure(
    fabric: Fabric,
    pairs: list[tuple[str, str]],
    seconds: float = 2.0,
    rate_bps: int | None = None,
) -> list[FlowResult]:
    """Run flows for all ``pairs`` at once (greedy, or at ``rate_bps``); each
    receiver's goodput."""
    flows = start_flows(fabric, pairs, seconds, rate_bps=rate_bps)
    try:
        return [flow.result() for flow in flows]
    finally:
        for flow in flows:
            flow.stop()


if __name__ == "__main__":
    sys.exit(main())
