"""Start the tests' ranks as forks of one process that has already imported torch.

Every rank a test launches is a new Python process that imports torch: 1.2–1.4 s of CPU
each on this project's 2-core machine, for about 200 ranks in a full run of the suite,
most of them before any rank can connect. A **fork server** imports torch once and
forks each rank from there; the rank then does what ``python SCRIPT ARGS`` does after
interpreter start-up, with the environment, working directory, standard streams and
``sys.path`` the rank was given:

* ``os.environ`` is the rank's own; ``sys.path`` is the script's directory, then the
  rank's ``PYTHONPATH``, then the interpreter's own entries;
* the first ``sitecustomize`` on that path runs, as at start-up;
* stdin is ``/dev/null``, stdout and stderr are the pipes the caller made;
* the script runs as ``__main__``; an uncaught exception prints its traceback and exits
  1, ``sys.exit`` gives its code, a signal its negative number (what ``Popen`` reports);
* exit handlers run and the interpreter shuts down as a script's would.

The ranks are real processes: their own pid, their own gloo connections, killed by
signal like any other. What a fork cannot reproduce, it does not try: a rank whose
environment would change what ``import torch`` did (``TORCH_*``, ``OMP_*``,
``LD_PRELOAD`` and the like, :data:`IMPORT_ENV`), or whose ``PYTHONPATH`` shadows a
module the server imported, starts as a new interpreter instead (:func:`start`).
``SYNCPACE_TEST_FORK=0`` starts every rank as a new interpreter.

The server is one process per test process (per worker under ``-n``), started on first
use, with one thread; it forks only from that thread, so no lock is held in a child.
Run as a script, this file *is* the server: ``python rankfork.py FD`` serves requests
on the ``SOCK_SEQPACKET`` socket ``FD`` until the socket closes.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

#: Environment variables read while torch, numpy or the interpreter start: a rank that
#: sets one of them differently from the server starts as a new interpreter.
IMPORT_ENV = ("TORCH", "OMP_", "MKL_", "KMP_", "OPENBLAS", "GOTO", "LD_", "PYTHON", "CUDA", "GLIBC")
#: Read only once a rank runs (``PYTHONPATH`` is applied to ``sys.path`` in the child).
RUN_ENV = ("PYTHONPATH",)
#: What the server imports before it forks anything.
PRELOAD = ("torch", "torch.distributed")
MESSAGE = 1 << 20


def import_env(env: dict[str, str]) -> dict[str, str]:
    """The part of ``env`` that an interpreter or ``import torch`` reads at start-up."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_ENV) and k not in RUN_ENV}


def enabled() -> bool:
    return os.environ.get("SYNCPACE_TEST_FORK", "1") != "0"


# --- the caller's side -----------------------------------------------------------------


class ForkedRank:
    """A rank forked by the server, with what :mod:`multirank` uses of ``Popen``."""

    def __init__(self, server: ForkServer, pid: int, stdout, stderr) -> None:
        self._server, self.pid = server, pid
        self.stdout, self.stderr = stdout, stderr
        self.returncode: int | None = None
        self.args = ["<forked>", pid]

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, block=False)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, block=True, timeout=timeout)
        return self.returncode

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def send_signal(self, sig: int) -> None:
        self._signal(sig)

    def _signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # exited since: the server reports it
                pass


class ForkServer:
    """The caller's end of one server: forks ranks, collects their exit statuses."""

    def __init__(self, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(theirs.fileno())],
            env=env,
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self._sock = ours
        self._lock = threading.Lock()
        self._one_start = threading.Lock()  # a reply is matched to its request by order
        self._changed = threading.Condition(self._lock)
        self._exits: dict[int, int] = {}
        self._started: list[int] = []
        self._closed = False
        self._modules: set[str] | None = None  # what the server imported, once it says
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.modules = self._hello()

    def _hello(self) -> set[str]:
        with self._changed:
            self._changed.wait_for(lambda: self._closed or self._modules is not None, 120)
            if self._modules is None:
                raise RuntimeError("the rank fork server did not start")
            return self._modules

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(MESSAGE)
            except OSError:
                data = b""
            with self._changed:
                if not data:
                    self._closed = True
                    self._changed.notify_all()
                    return
                msg = json.loads(data)
                if "modules" in msg:
                    self._modules = set(msg["modules"])
                elif "started" in msg:
                    self._started.append(msg["started"])
                elif "exited" in msg:
                    self._exits[msg["exited"]] = msg["code"]
                self._changed.notify_all()

    def start(self, script: str, args: list[str], env: dict[str, str]) -> ForkedRank:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        request = {"script": script, "args": list(args), "env": env, "cwd": os.getcwd()}
        try:
            with self._one_start, self._changed:
                socket.send_fds(self._sock, [json.dumps(request).encode()], [out_w, err_w])
                if not self._changed.wait_for(lambda: self._started or self._closed, 60):
                    raise RuntimeError("the rank fork server did not answer within 60 s")
                if not self._started:
                    raise RuntimeError("the rank fork server has exited")
                pid = self._started.pop(0)
        finally:
            os.close(out_w)
            os.close(err_w)
        return ForkedRank(
            self,
            pid,
            open(out_r, encoding="utf-8", errors="replace"),
            open(err_r, encoding="utf-8", errors="replace"),
        )

    @property
    def closed(self) -> bool:
        return self._closed

    def exit_code(self, pid: int, *, block: bool, timeout: float | None = None) -> int | None:
        with self._changed:
            if block:
                self._changed.wait_for(lambda: pid in self._exits or self._closed, timeout)
            if pid in self._exits:
                return self._exits[pid]
            if self._closed:  # the server died: its ranks' statuses are lost
                return -signal.SIGKILL
            if block:
                raise subprocess.TimeoutExpired(f"forked rank {pid}", timeout)
            return None

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


_SERVERS: dict[tuple, ForkServer] = {}


def _key(env: dict[str, str]) -> tuple:
    return tuple(sorted(import_env(env).items()))


def _shadows(pythonpath: str, modules: set[str]) -> bool:
    """Whether a ``PYTHONPATH`` entry holds a module the server has already imported."""
    for entry in filter(None, pythonpath.split(os.pathsep)):
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            if name.removesuffix(".py") in modules and name != "sitecustomize.py":
                return True
    return False


def start(script: str, args: list[str], env: dict[str, str]) -> ForkedRank | None:
    """A rank forked from this process's server, or None where it must start as a new
    interpreter. The server is started on first use with that rank's start-up settings;
    a rank whose settings differ starts afresh (one server per process: a second would
    cost as much as the ranks it saves)."""
    if not enabled():
        return None
    key = _key(env)
    server = _SERVERS.get(key)
    if server is None:
        if _SERVERS:
            return None
        server = _SERVERS[key] = ForkServer(env)
    if _shadows(env.get("PYTHONPATH", ""), server.modules):
        return None
    if server.closed:  # it died: every later rank starts as a new interpreter
        return None
    return server.start(script, args, env)


@atexit.register
def _close_servers() -> None:
    for server in _SERVERS.values():
        server.close()
    _SERVERS.clear()


# --- the server's side -----------------------------------------------------------------


def _serve(sock: socket.socket) -> tuple[dict, int, int] | None:
    """Fork a rank per request until the socket closes; in a child, return its request
    and stream descriptors (the child then runs the script), in the server, None."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    top = {name.partition(".")[0] for name in sys.modules}
    sock.send(json.dumps({"modules": sorted(top)}).encode())
    import select

    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(sock)
        if sock not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MESSAGE, 2)
        except OSError:
            data = b""
        if not data:
            return None
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(wake_r)
            os.close(wake_w)
            sock.close()
            return request, fds[0], fds[1]
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"started": pid}).encode())


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        try:
            sock.send(json.dumps({"exited": pid, "code": code}).encode())
        except OSError:
            pass


def _become(request: dict, out_fd: int, err_fd: int, base_path: list[str]) -> None:
    """Turn this fork into ``python SCRIPT ARGS`` with the request's settings."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((devnull, 0), (out_fd, 1), (err_fd, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = os.path.abspath(request["script"])
    sys.argv = [request["script"], *request["args"]]
    extra = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.path.dirname(script), *extra, *base_path]
    if "numpy.random" in sys.modules:  # a new interpreter seeds it from the OS
        sys.modules["numpy.random"].seed()
    sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  (what start-up runs first)
    except ImportError:
        pass


def _run(script: str) -> int:
    import runpy
    import traceback

    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as e:  # what the interpreter prints for an uncaught exception
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != os.path.abspath(script):
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb or e.__traceback__)
        return 1
    return 0


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    own = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    own_abs = {os.path.abspath(p) for p in own if p}
    here = os.path.dirname(os.path.abspath(__file__))
    base_path = [p for p in sys.path[1:] if p and os.path.abspath(p) not in own_abs]
    if here in base_path:
        base_path.remove(here)
    for name in PRELOAD:
        __import__(name)
    import gc

    gc.collect()
    gc.freeze()  # the children share these pages instead of copying them on a collection
    child = _serve(sock)
    if child is None:
        return
    request, out_fd, err_fd = child
    _become(request, out_fd, err_fd, base_path)
    sys.exit(_run(request["script"]))


if __name__ == "__main__":
    main()
