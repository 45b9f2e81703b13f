"""Running the manager (uvicorn) and, for `corral up`, local agents beside it."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import uvicorn

from corral.api.app import create_app
from corral.settings import ManagerSettings, SchedulerSettings


def serve_manager(settings: ManagerSettings, scheduler: SchedulerSettings | None = None) -> None:
    app = create_app(settings, scheduler)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level="warning", timeout_graceful_shutdown=3
    )
    uvicorn.Server(config).run()


def agent_token_file(data: Path) -> str:
    """The embedded cluster's agent token, made once and kept (mode 600) in the data dir."""
    path = data / "agent_token"
    if not path.is_file():
        data.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path.read_text().strip()


def spawn_agents(n: int, url: str, token: str, data: Path) -> list[subprocess.Popen[bytes]]:
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
            str(data / "agents" / f"local-{i}"),
        ]
        procs.append(subprocess.Popen(cmd, env=env))
    return procs


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


async def serve_embedded(
    settings: ManagerSettings, scheduler: SchedulerSettings, agents: int, data: Path
) -> None:
    app = create_app(settings, scheduler)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host=settings.host, port=settings.port, log_level="warning", timeout_graceful_shutdown=3
        )
    )
    url = f"http://{settings.host}:{settings.port}"
    serving = asyncio.create_task(server.serve())
    while not server.started and not serving.done():  # noqa: ASYNC110 - uvicorn exposes only a flag
        await asyncio.sleep(0.05)
    if serving.done():
        await serving
        return
    procs = spawn_agents(agents, url, settings.agent_token, data)
    try:
        await serving
    finally:
        stop_all(procs)
