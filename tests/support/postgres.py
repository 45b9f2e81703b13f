"""A throwaway PostgreSQL cluster from the installed server binaries (as `postgres` when root)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """A running server; `dsn(db)` gives an asyncpg URL."""

    port: int
    datadir: Path
    root: Path
    opts: str = ""
    """The server's command-line options (to start it again after `pause`)."""

    def dsn(self, db: str = "postgres") -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{db}"

    def psql(self, sql: str, db: str = "postgres") -> str:
        out = subprocess.run(
            [
                _bindir() + "/psql" if os.path.exists(_bindir() + "/psql") else "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                db,
                "-tAc",
                sql,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

    def pause(self) -> None:
        """Shut the server down (fast: sessions ended), keeping its data."""
        _pg_ctl(self.datadir, "stop", "-m", "fast")

    def resume(self) -> None:
        """Start it again after `pause`, on the same port."""
        _pg_ctl(self.datadir, "start", "-o", self.opts, "-l", str(self.root / "log"), "-w", "-t", "60")

    def stop(self) -> None:
        pidfile = self.datadir / "postmaster.pid"
        if pidfile.exists():
            pid = int(pidfile.read_text().splitlines()[0])
            try:
                os.kill(pid, signal.SIGQUIT)  # immediate shutdown: it is a throwaway cluster
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
        shutil.rmtree(self.root, ignore_errors=True)


def _pg_ctl(datadir: Path, *args: str) -> None:
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    # Output to files only: a started server keeps its descriptors, and a pipe would never close.
    subprocess.run(
        [*as_user, f"{_bindir()}/pg_ctl", "-D", str(datadir), *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _bindir() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not found:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    return found[-1]


def start_postgres() -> PgServer:
    bindir = _bindir()
    root = Path(tempfile.mkdtemp(prefix="corral-pg-"))
    datadir = root / "data"
    as_user: list[str] = []
    if os.geteuid() == 0:
        # pg_ctl refuses to run as root: hand the directory to `postgres` and run as it.
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [
            *as_user,
            f"{bindir}/initdb",
            "-D",
            str(datadir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    port = free_port()
    opts = (
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
        "-c full_page_writes=off -c max_connections=300"
    )
    subprocess.run(
        [
            *as_user,
            f"{bindir}/pg_ctl",
            "-D",
            str(datadir),
            "-o",
            opts,
            "-l",
            str(root / "log"),
            "-w",
            "-t",
            "60",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    return PgServer(port, datadir, root, opts)
