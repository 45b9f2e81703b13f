"""What every bench shares: percentiles, server timestamps, and the database it runs on (a new
SQLite file, a throwaway PostgreSQL cluster with --postgres, or a URL given)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import psutil
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHM = "/dev/shm"


def _on_tmpfs(path: str) -> bool:
    try:
        with open("/proc/mounts") as mounts:
            return any(f[1] == path and f[2] == "tmpfs" for f in (line.split() for line in mounts))
    except OSError:
        return False


# Work dirs (the database, a PostgreSQL cluster, agents' kernel files, Slurm's) go to /dev/shm when
# it is a writable tmpfs with 2 GiB free and TMPDIR names nothing else.  A run removes its work
# dir, thousands of inodes; on an ext4 without a journal (this machine's root) every file created
# in the next 1-5 minutes then scans past the recently freed inodes (perf: 12% of all CPU in
# `recently_deleted` and `find_inode_bit`, under the agents' mkdir and open), so one run slowed
# the next by 10-20%.  Corral and Slurm share the one place; TMPDIR=/tmp puts both on disk.


def _roomy(path: str, need: int = 2 << 30) -> bool:
    """At least `need` bytes free (a container's /dev/shm is often 64 MiB)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize >= need


if not os.environ.get("TMPDIR") and os.access(SHM, os.W_OK) and _on_tmpfs(SHM) and _roomy(SHM):
    tempfile.tempdir = SHM


def at(value: str) -> float:
    """A server timestamp (ISO 8601) as seconds."""
    return datetime.fromisoformat(value).timestamp()


def pct(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank (q in 0..1)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def scratch(prefix: str, stack: ExitStack, keep: bool = False) -> Path:
    """A run's work dir (database, logs, kernel files), removed when `stack` closes; kept, and named,
    with `keep` or CORRAL_BENCH_KEEP=1."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    if keep or os.environ.get("CORRAL_BENCH_KEEP", "").lower() in ("1", "true", "yes"):
        stack.callback(print, f"work dir kept: {work}", file=sys.stderr)
    else:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
    return work


def add_database_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--database-url", default="", help="default: a new SQLite file")
    group.add_argument(
        "--postgres", action="store_true", help="start a throwaway PostgreSQL cluster and use it"
    )


@contextmanager
def database(args: argparse.Namespace, work: Path) -> Iterator[str]:
    """The URL to run on, the PostgreSQL cluster stopped afterwards when this started it."""
    if args.database_url:
        yield args.database_url
        return
    if not args.postgres:
        yield f"sqlite+aiosqlite:///{work}/corral.db"
        return
    from tests.support.postgres import start_postgres

    server = start_postgres()
    try:
        server.psql("CREATE DATABASE corral_bench")
        yield server.dsn("corral_bench")
    finally:
        server.stop()


def server_pid(url: str) -> int | None:
    """The pid of the PostgreSQL server of `url` when it runs on this machine, reached over TCP on
    127.0.0.1 or localhost, and was started with its port on the command line (the throwaway
    cluster of --postgres is); None otherwise (the bench then prints no PostgreSQL part)."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("postgresql") or parsed.host not in ("127.0.0.1", "localhost"):
        return None
    port = str(parsed.port or 5432)
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        argv = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and any(a == "-p" and b == port for a, b in pairwise(argv)):
            return int(proc.info["pid"])
    return None


def machine(url: str) -> str:
    """The line every bench prints first: core count and backend."""
    backend = "postgresql" if url.startswith("postgresql") else "sqlite"
    return f"cores: {os.cpu_count()}  backend: {backend}  work dirs: {tempfile.gettempdir()}"


ENDED = ("TERMINATED", "ERROR", "CANCELLED")


def get_json(c: Any, path: str, timeout: float = 120, **params: Any) -> Any:
    """GET through a manager that may be down a moment (a kill, a restart): retried until it
    answers 200, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            resp = c.http.get(path, params=params)
            if resp.status_code == 200:
                return resp.json()
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"GET {path} did not answer for {timeout:g} s")
        time.sleep(0.2)


def ended(c: Any) -> int:
    """How many sessions have ended."""
    counts = get_json(c, "/api/v1/sessions/counts")
    return sum(counts.get(k, 0) for k in ENDED)


def submit_true(c: Any, n: int, over: float = 0.0) -> int:
    """`n` 1-CPU `true` sessions, 100 a request (the requests spread evenly over `over` seconds);
    returns how many had ended before them."""
    before = ended(c)
    gap = over / max(1, (n + 99) // 100)
    for start in range(0, n, 100):
        due = time.monotonic() + gap
        body = {"sessions": [{"command": ["true"], "resources": {"cpu": 1}}] * min(100, n - start)}
        resp = c.http.post("/api/v1/sessions/bulk", json=body, timeout=120)
        assert resp.status_code == 201, resp.text
        time.sleep(max(0.0, due - time.monotonic()))
    return before


def two_wide_agents(args: argparse.Namespace, stack: ExitStack, prefix: str) -> tuple[str, Any]:
    """A manager on the bench's database and two agents of 32 CPUs, closed with `stack`; the
    database URL and the cluster (tests/support/cluster.Cluster)."""
    from tests.support.cluster import Cluster

    work = scratch(prefix, stack)
    url = stack.enter_context(database(args, work))
    c = Cluster(url, work)
    stack.callback(c.close)
    c.start_manager()
    c.start_agent("bench-a", cpu=32, mem="64G")
    c.start_agent("bench-b", cpu=32, mem="64G")
    return url, c
