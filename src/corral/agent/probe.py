"""Health checks of the deployment replicas this agent runs (DESIGN §7: agents probe, next to the
replica; the manager never does).

A replica's kernel is given a free port of `serve_ports` as `$CORRAL_PORT`.  Once its process has
started and `initial_delay` has passed, it is probed every `interval`: `GET
http://127.0.0.1:$CORRAL_PORT{path}`, a 2xx or 3xx within `timeout` is good.  The counts in a row
and the last result go to the manager after each round of probes, so a change reaches it within
one interval (and a route whose reports stop is judged stale there)."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx
import structlog

from corral.agent.client import Fenced, ManagerUnreachable, Rejected
from corral.agent.loop import Loop
from corral.domain.rendezvous import parse_port_range
from corral.protocol.orders import ServeSpec
from corral.protocol.replicas import ReplicasIn, ReplicaState

if TYPE_CHECKING:
    from corral.agent.agent import Agent
    from corral.agent.kernel import KernelRunner

log = structlog.get_logger("corral.agent.probe")

TICK = 0.1
"""Seconds between looks for probes due."""


@dataclass(eq=False)
class Watched:
    runner: KernelRunner
    serve: ServeSpec
    port: int
    started: float | None = None
    """Monotonic time its process was first seen running."""
    next_probe: float = 0.0
    ok: int = 0
    failed: int = 0
    detail: str = ""
    probed: bool = False
    said_running: bool = field(default=False)


def free_port(low: int, high: int, taken: set[int]) -> int | None:
    """A port of low..high that nothing listens on and no replica here was given, tried from a
    random place: agents sharing a host (`corral up`) rarely pick the same one at once, and a
    replica that loses that race fails to start and is replaced."""
    span = high - low + 1
    start = random.randrange(span)
    for i in range(span):
        port = low + (start + i) % span
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        return port
    return None


async def probe(http: httpx.AsyncClient, port: int, serve: ServeSpec) -> tuple[bool, str]:
    """One health check: whether it passed, and what it found."""
    try:
        resp = await http.get(f"http://127.0.0.1:{port}{serve.path}", timeout=serve.timeout)
    except httpx.TimeoutException:
        return False, f"no answer within {serve.timeout:g} s"
    except httpx.ConnectError:
        return False, "connection refused"
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {str(exc)[:200]}"
    return 200 <= resp.status_code < 400, f"HTTP {resp.status_code}"


class Prober(Loop):
    name = "agent:probe"

    def __init__(self, agent: Agent) -> None:
        super().__init__()
        self._agent = agent
        self._watched: dict[str, Watched] = {}

    def port_for(self, runner: KernelRunner, serve: ServeSpec) -> int | None:
        """The port the replica is to listen on (None: the range is used up); it is watched from
        now on."""
        known = self._watched.get(runner.kernel_id)
        if known is not None and known.runner is runner:
            return known.port
        low, high = parse_port_range(self._agent.cfg.serve_ports)
        port = free_port(low, high, {w.port for w in self._watched.values()})
        if port is not None:
            self._watched[runner.kernel_id] = Watched(runner, serve, port)
        return port

    async def _loop(self) -> None:
        async with httpx.AsyncClient(trust_env=False, follow_redirects=False) as http:
            while True:
                await asyncio.sleep(TICK)
                await self._round(http)

    async def _round(self, http: httpx.AsyncClient) -> None:
        now = time.monotonic()
        for kid, w in list(self._watched.items()):
            if w.runner.ended or self._agent.kernels.get(kid) is not w.runner:
                del self._watched[kid]
            elif w.started is None and w.runner.pid is not None:
                w.started = now
                w.next_probe = now + w.serve.initial_delay
        due = [w for w in self._watched.values() if w.started is not None and now >= w.next_probe]
        fresh = [w for w in self._watched.values() if w.started is not None and not w.said_running]
        if not due and not fresh:
            return
        results = await asyncio.gather(*(probe(http, w.port, w.serve) for w in due))
        for w, (good, detail) in zip(due, results, strict=True):
            w.ok, w.failed = (w.ok + 1, 0) if good else (0, w.failed + 1)
            w.detail, w.probed = detail, True
            w.next_probe = time.monotonic() + w.serve.interval
        await self._send([*dict.fromkeys([*due, *fresh])])

    async def _send(self, told: list[Watched]) -> None:
        agent = self._agent
        states = [
            ReplicaState(
                session_id=w.runner.session_id,
                port=w.port,
                running=True,
                ok_in_a_row=w.ok,
                failed_in_a_row=w.failed,
                detail=w.detail,
                probed=w.probed,
            )
            for w in told
        ]
        epoch = agent.epoch
        try:
            await agent.client.replicas(ReplicasIn(agent_id=agent.cfg.id, epoch=epoch, replicas=states))
        except Fenced as exc:
            await agent.fenced(str(exc), epoch)
            return
        except (ManagerUnreachable, Rejected) as exc:
            log.warning("replica health not sent; sent with the next round", error=str(exc))
            return
        for w in told:
            w.said_running = True

    def clear(self) -> None:
        """Fenced: its kernels are gone."""
        self._watched.clear()
