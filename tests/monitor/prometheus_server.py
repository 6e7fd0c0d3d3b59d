"""A real Prometheus server for tests: started on a free port, scraping given targets.

Debian's ``prometheus`` package provides the binary (CI installs it). The server keeps
its data in a temporary directory and is stopped, and waited for, on exit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from syncpace.ports import free_port


def find_prometheus() -> str | None:
    return shutil.which("prometheus")


@contextmanager
def prometheus(
    binary: str,
    targets: list[str],
    workdir: Path,
    interval_s: float = 0.25,
    rules: Path | None = None,
) -> Iterator[str]:
    """Yield the server's base URL once it is ready and has tried every one of
    ``targets`` once (a job started before would go unscraped for its first seconds); it
    scrapes them and, with ``rules``, evaluates that rules file at the scrape interval."""
    interval = f"{int(interval_s * 1000)}ms"
    config = workdir / "prometheus.yml"
    rule_files = f"rule_files: [{json.dumps(str(rules))}]\n" if rules is not None else ""
    config.write_text(
        "global:\n"
        f"  scrape_interval: {interval}\n"
        f"  scrape_timeout: {interval}\n"
        f"  evaluation_interval: {interval}\n"
        f"{rule_files}"
        "scrape_configs:\n"
        "  - job_name: syncpace\n"
        "    static_configs:\n"
        f"      - targets: {json.dumps(targets)}\n"
    )
    port = free_port()
    log = open(workdir / "prometheus.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(workdir / 'prometheus.log').read_text()}")
            if _scraping(url, len(targets)):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus did not become ready within 30 s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _scraping(url: str, count: int) -> bool:
    """Whether the server is ready and has tried to scrape all ``count`` targets (down
    ones too: the job's are up only once it runs)."""
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
            if r.status != 200:
                return False
        with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=1) as r:
            active = json.load(r)["data"]["activeTargets"]
    except (OSError, ValueError, KeyError):
        return False
    # a target not tried yet has the zero time as its last scrape
    tried = [t for t in active if not t.get("lastScrape", "0001").startswith("0001")]
    return len(tried) >= count


def query_range(url: str, query: str, start: float, end: float, step_s: float) -> list[dict]:
    """The ``result`` of ``/api/v1/query_range`` (matrix: one entry per series)."""
    params = urllib.parse.urlencode(
        {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s}"}
    )
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"query {query!r} failed: {body}")
    return body["data"]["result"]
