"""Shared fixtures: the database backends every integration test runs on."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral.agent.identity import ensure_account
from corral.store.db import upgrade
from corral.store.dialect.engine import make_engine
from tests.support.postgres import PgServer, start_postgres

BACKENDS = ["sqlite", "postgres"]

# A suite started as a background job from a script, or under nohup, inherits SIGINT and SIGQUIT
# ignored, and so would every process it starts: a CLI that ignores Ctrl-C cannot be tested for it.
# Restored here (in the controller and in each xdist worker), so that a test's outcome never depends
# on how the suite was started.  SIGHUP stays as given: under nohup the run must outlive its terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


@pytest.fixture(scope="session", autouse=True)
def kernel_account(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Agents started as root (CI runs as root) run kernels as the unprivileged `corral` account,
    which `corral up` creates; kernels' work dirs under pytest's temp tree must be reachable by it."""
    base = tmp_path_factory.getbasetemp()
    # One worker at a time (the lock beside their temp trees): two `useradd`s at once can both
    # succeed, the second giving the account a new uid under kernels the first already started.
    with open(base.parent / "kernel-account.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_account()
    dirs = [base.parent, base]
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's base is a level deeper (popen-gwN)
        dirs.insert(0, base.parent.parent)
    for d in dirs:
        d.chmod(d.stat().st_mode | 0o011)


@pytest.fixture(scope="session", autouse=True)
def cwd_kernels_can_enter(kernel_account: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """`corral run` starts kernels where it is run (as sbatch does); a clone under root's home (0700)
    would have every kernel of the `corral` account exit 126. The suite's CLI runs from its temp
    tree instead, which kernels may traverse (kernel_account), wherever the checkout is."""
    before = os.getcwd()
    os.chdir(tmp_path_factory.getbasetemp())
    yield
    os.chdir(before)


@pytest.fixture
def tmp_path(tmp_path: Path) -> Path:
    """pytest's, writable by kernels of any account: tests hand it to kernels for marker files, like
    a shared scratch directory on a real cluster."""
    tmp_path.chmod(0o1777)
    return tmp_path


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer | str]:
    """A PostgreSQL for the run: CORRAL_TEST_PG_DSN if given, else one started here.

    A PostgreSQL that cannot be started fails the run: the suite never silently drops a backend.
    """
    given = os.environ.get("CORRAL_TEST_PG_DSN")
    if given:
        yield given
        return
    server = start_postgres()
    try:
        template = server.dsn("corral_template")
        server.psql("CREATE DATABASE corral_template")

        async def migrate() -> None:
            engine = make_engine(template)
            await upgrade(engine)
            await engine.dispose()

        asyncio.run(migrate())
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def fresh_database(
    pg_server: PgServer | str, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], str]:
    """A new empty-but-migrated database URL for a backend (PostgreSQL: cloned from the template)."""

    def make(backend: str) -> str:
        if backend == "sqlite":
            path = Path(tmp_path_factory.mktemp("sqlite")) / "corral.db"
            return f"sqlite+aiosqlite:///{path}"
        if isinstance(pg_server, str):
            return pg_server
        name = "t_" + uuid.uuid4().hex[:12]
        pg_server.psql(f"CREATE DATABASE {name} TEMPLATE corral_template")
        return pg_server.dsn(name)

    return make
