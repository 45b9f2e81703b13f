"""Running the manager (uvicorn) and, for `corral up`, local agents beside it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import uvicorn

from corral.boot.local_agents import LocalAgents
from corral.boot.manager_app import create_app, prepare_database
from corral.settings import ManagerSettings, SchedulerSettings
from corral.store.dialect.engine import make_engine
from corral.waits import STOP_WAIT, exit_when_stuck

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
uvicorn's 5 s, the server may close a connection just as a client sends a request on it, which then
fails with "Server disconnected without sending a response"."""


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
    local = LocalAgents(agents, url, settings.agent_token, kernels)
    local.start()
    ready = asyncio.create_task(_say_ready(url, settings.bootstrap_admin_key, agents))
    try:
        # Only our own stop signals end this: a dead agent is restarted (boot/local_agents.py).
        while not server.should_exit and not serving.done():
            local.tick()
            await asyncio.sleep(0.2)
    finally:
        ready.cancel()
        # Agents first, while the manager still answers: they report their kernels' ends and leave.
        await asyncio.to_thread(local.shutdown)
        server.should_exit = True
        await serving
        await exit_when_stuck(STOP_WAIT)


READY_WAIT = 60.0


async def _say_ready(url: str, key: str | None, agents: int) -> None:
    """One line once the local agents have registered: from then on `corral run` is placed at once."""
    deadline = time.monotonic() + READY_WAIT
    alive = 0
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=5) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
                listed = (await client.get(f"{url}/api/v1/agents")).json()
                alive = sum(
                    a["status"] == "ALIVE" for a in listed if str(a.get("id", "")).startswith("local-")
                )
            if alive >= agents:
                break
            await asyncio.sleep(0.2)
    what = (
        f"{alive} of {agents} local agents registered"
        if alive < agents
        else f"{agents} local agent(s) registered"
    )
    print(f"corral: ready at {url}; {what}", file=sys.stderr, flush=True)
