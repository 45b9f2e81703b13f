"""Shipping kernels' output to the manager, as fast as it takes it; idle polls are 0.2 s apart.

What to send of each kernel is its `KernelLogs`' (agent/shipper.py); this loop sends it, under the
agent's current epoch, and stops shipping a kernel the manager says is not this agent's any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

import structlog

from corral.agent.client import Fenced, ManagerUnreachable, Rejected
from corral.agent.loop import Loop
from corral.agent.shipper import KernelLogs, Piece
from corral.protocol.logs import LogShipment

if TYPE_CHECKING:
    from corral.agent.agent import Agent

log = structlog.get_logger("corral.agent.ship")

IDLE = 0.2
"""Seconds between looks at the kernels' files when none had anything to send."""


class LogShipper(Loop):
    name = "agent:logs"

    def __init__(self, agent: Agent) -> None:
        super().__init__()
        self._agent = agent
        self.shipping: dict[str, KernelLogs] = {}
        """By kernel key: the output of kernels started here, until all of it was shipped."""

    def add(self, key: str, logs: KernelLogs) -> None:
        self.shipping[key] = logs

    def clear(self) -> None:
        """Fenced: no kernel's output is this agent's to ship any more."""
        self.shipping.clear()

    def _shipment(self, logs: KernelLogs, piece: Piece, epoch: int, eof: bool) -> LogShipment:
        return LogShipment(
            agent_id=self._agent.cfg.id,
            epoch=epoch,
            kernel_id=logs.kernel_id,
            generation=logs.generation,
            stream=piece.stream,
            offset=piece.offset,
            eof=eof,
        )

    async def _loop(self) -> None:
        agent = self._agent
        while True:
            busy = False
            for key, logs in list(self.shipping.items()):
                if logs.closed:
                    self.shipping.pop(key, None)  # its final report said all of it was shipped
                    continue
                piece, eof = logs.next_piece(), False
                if piece is None:
                    if not logs.ended:
                        continue
                    piece, eof = logs.end_piece(), True
                epoch, sent = agent.epoch, time.monotonic()
                try:
                    reply = await agent.client.ship_logs(self._shipment(logs, piece, epoch, eof), piece.data)
                except Fenced as exc:
                    await agent.fenced(str(exc), epoch)
                    break
                except ManagerUnreachable:
                    await asyncio.sleep(0.5)
                    break
                except Rejected as exc:
                    log.error(
                        "log shipment refused; the rest of this kernel's output is dropped", error=str(exc)
                    )
                    self.shipping.pop(key, None)
                    with contextlib.suppress(Exception):  # say it is over, so readers stop waiting
                        await agent.client.ship_logs(
                            self._shipment(logs, Piece(piece.stream, 0, b""), epoch, True), b""
                        )
                    continue
                if reply.recorded:
                    agent.fence.contact(sent)
                if not reply.stored or eof:
                    self.shipping.pop(key, None)
                    continue
                logs.commit(piece)
                busy = True
            if not busy:
                await asyncio.sleep(IDLE)
