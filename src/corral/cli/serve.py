"""Running the manager (uvicorn) and, for `corral up`, local agents beside it."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from corral.api.app import create_app, prepare_database
from corral.settings import ManagerSettings, SchedulerSettings
from corral.store.db import make_engine
from corral.waits import STOP_WAIT, exit_when_stuck

PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Server(uvicorn.Server):
    """uvicorn re-raises the stop signal once it has shut down, which would kill `corral up` before
    its agents are stopped: here the caller owns the signals and decides when to exit."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


KEEP_ALIVE = 65
"""Seconds an idle connection is kept open: longer than the clients keep one for reuse (httpx, which
the agents, the CLI and the tests use: 5 s), so that it is the client that closes it.  With
uvicorn's 5 s, a request sent as the server closed failed with "Server disconnected without sending
a response" (a CI run)."""


def _config(settings: ManagerSettings, scheduler: SchedulerSettings | None) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(settings, scheduler),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        log_config=None,  # the root logger's redacting handler (logsetup) applies to uvicorn too
        timeout_graceful_shutdown=3,
        timeout_keep_alive=KEEP_ALIVE,
    )


def _stoppable(settings: ManagerSettings, scheduler: SchedulerSettings | None) -> _Server:
    """A server that shuts down gracefully on SIGTERM, SIGINT or SIGHUP (and then returns)."""
    server = _Server(_config(settings, scheduler))
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    return server


async def preflight(settings: ManagerSettings) -> None:
    """Migrate and check the stored settings before serving: a problem is one line, not a traceback."""
    engine = make_engine(settings.resolved_database_url())
    try:
        await prepare_database(engine, settings)
    finally:
        await engine.dispose()


def serve_manager(settings: ManagerSettings, scheduler: SchedulerSettings | None = None) -> None:
    async def serve() -> None:
        await preflight(settings)
        await _stoppable(settings, scheduler).serve()
        await exit_when_stuck(STOP_WAIT)

    asyncio.run(serve())


def private_dir(path: Path) -> Path:
    """A directory only its owner can read (the database, keys and kernel files live there)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def agent_token_file(data: Path) -> str:
    """The embedded cluster's agent token, made once and kept (mode 600) in the data dir."""
    path = private_dir(data) / "agent_token"
    if not path.is_file():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
    path.chmod(0o600)
    return path.read_text().strip()


def kernel_tree(data: Path) -> Path:
    """Where this installation's kernels keep their directories. Kernels of a user's installation run
    as that user: the private data dir will do. Root's run as other accounts, which must traverse to
    their own directories without seeing anyone else's: /var/lib/corral/<installation>, mode 711."""
    if os.geteuid() != 0:
        return data
    install = hashlib.sha1(str(data.resolve()).encode()).hexdigest()[:10]
    tree = Path("/var/lib/corral") / install
    for d in (tree.parent, tree, tree / "agents", tree / "checkpoints"):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o711)
    return tree


def _die_with_parent() -> None:
    """In the agent child: SIGTERM when `corral up` dies, even by SIGKILL (no orphaned agents)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def spawn_agents(n: int, url: str, token: str, kernels: Path) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(1, n + 1):
        env = dict(os.environ, CORRAL_AGENT_TOKEN=token)
        cmd = [
            sys.executable,
            "-m",
            "corral",
            "agent",
            "--manager",
            url,
            "--id",
            f"local-{i}",
            "--work-dir",
            str(kernels / "agents" / f"local-{i}"),
        ]
        procs.append(subprocess.Popen(cmd, env=env, preexec_fn=_die_with_parent))
    return procs


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


async def serve_embedded(
    settings: ManagerSettings, scheduler: SchedulerSettings, agents: int, kernels: Path
) -> None:
    """Until SIGTERM, SIGINT or SIGHUP: then the agents stop (killing their kernels), then the manager."""
    await preflight(settings)
    server = _stoppable(settings, scheduler)
    url = f"http://{settings.host}:{settings.port}"
    serving = asyncio.create_task(server.serve())
    while not server.started and not serving.done():  # noqa: ASYNC110 - uvicorn exposes only a flag
        await asyncio.sleep(0.05)
    if serving.done():
        await serving
        return
    procs = spawn_agents(agents, url, settings.agent_token, kernels)
    try:
        while not server.should_exit and all(p.poll() is None for p in procs):  # noqa: ASYNC110
            await asyncio.sleep(0.2)
    finally:
        # Agents first, while the manager still answers: they report their kernels' ends and leave.
        await asyncio.to_thread(stop_all, procs)
        server.should_exit = True
        await serving
        await exit_when_stuck(STOP_WAIT)
