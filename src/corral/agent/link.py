"""The agent's end of its supervisor: start it, send commands, dispatch its events."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable

import structlog
from pydantic import ValidationError

from corral.agent.cgroup import CgroupMode
from corral.agent.commands import Command
from corral.agent.events import EVENTS, Event

log = structlog.get_logger("corral.agent.link")


class SupervisorLink:
    """If the agent dies, the supervisor sees end-of-file on this pipe and kills every kernel."""

    def __init__(
        self,
        mode: CgroupMode,
        on_event: Callable[[Event], None],
        on_exit: Callable[[int | None], None] | None = None,
        spawn_helper: bool = True,
    ) -> None:
        self.mode = mode
        self.spawn_helper = spawn_helper
        self._on_event = on_event
        self._on_exit = on_exit
        self._closing = False
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "corral.agent.supervisor",
            *self.mode.argv(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "CORRAL_SPAWN_HELPER": "on" if self.spawn_helper else "off"},
        )
        self._reader = asyncio.create_task(self._read(), name="agent:supervisor")

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        async for line in self._proc.stdout:
            try:
                event = EVENTS.validate_json(line)
            except ValidationError:
                log.warning("unreadable line from the supervisor", line=line[:200])
                continue
            try:
                self._on_event(event)
            except Exception:  # one event the agent cannot handle must not stop it hearing the rest
                log.exception("could not handle a supervisor event", ev=event.ev)
        if self._proc.returncode is None:
            await self._proc.wait()
        if not self._closing:
            log.error("supervisor exited", returncode=self._proc.returncode)
            if self._on_exit is not None:
                self._on_exit(self._proc.returncode)

    def send(self, command: Command) -> bool:
        """False when the supervisor is gone (the caller fails what it asked for)."""
        if self._proc is None or self._proc.stdin is None or self._proc.stdin.is_closing() or not self.alive:
            return False
        try:
            self._proc.stdin.write(command.model_dump_json().encode() + b"\n")
        except (OSError, RuntimeError):
            return False
        return True

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def kill(self) -> None:
        """SIGKILL, for a supervisor that no longer does its job (its kernels are the caller's now)."""
        self._closing = True
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            await self._proc.wait()
        if self._reader:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def close(self) -> None:
        """End of file: the supervisor kills whatever still runs, then exits."""
        self._closing = True
        if self._proc is None:
            return
        if self._proc.stdin and not self._proc.stdin.is_closing():
            self._proc.stdin.close()
        try:
            await asyncio.wait_for(self._proc.wait(), 15)
        except TimeoutError:
            self._proc.kill()
        if self._reader:
            await asyncio.gather(self._reader, return_exceptions=True)
