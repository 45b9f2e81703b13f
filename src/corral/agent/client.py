"""The agent protocol client: the only way an agent talks to the manager."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from corral.agent.shipper import KernelLogs, Piece
from corral.protocol.messages import HealthOut, LogsShipped, OrdersOut, RegisterOut, ReportsOut

Reply = TypeVar("Reply", bound=BaseModel)


class Fenced(Exception):
    """The manager refused this agent's epoch: everything it runs must stop, then re-register."""


class Refused(Exception):
    """The manager said no for a reason this agent must show its operator (e.g. a duplicate id)."""


class Rejected(Exception):
    """The manager refused a message as malformed (4xx): sending it again cannot help."""


class ManagerUnreachable(Exception):
    """No answer (network, manager down, or a 5xx)."""


def _read(model: type[Reply], data: dict[str, Any]) -> Reply:
    """A reply as its typed model: one this agent does not understand is refused, not guessed at."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise Rejected(f"unreadable reply from the manager: {exc}") from exc


class ProtocolClient:
    def __init__(self, base_url: str, token: str) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(10.0, read=70.0),
        )

    async def _post(self, path: str, body: dict[str, Any] | None = None, **raw: Any) -> dict[str, Any]:
        try:
            resp = await self._http.post(f"/api/v1/agent/{path}", json=body, **raw)
        except httpx.HTTPError as exc:
            raise ManagerUnreachable(repr(exc)) from exc
        if resp.status_code == 409 and resp.json().get("error", {}).get("code") == "fenced":
            raise Fenced(resp.json()["error"]["message"])
        if resp.status_code == 409:
            raise Refused(resp.json().get("error", {}).get("message", resp.text))
        if resp.status_code >= 500:
            raise ManagerUnreachable(f"{resp.status_code} from the manager")
        if resp.status_code >= 400:
            raise Rejected(f"manager refused {path}: {resp.status_code} {resp.text[:500]}")
        data: dict[str, Any] = resp.json()
        return data

    async def register(self, **body: Any) -> RegisterOut:
        return _read(RegisterOut, await self._post("register", body))

    async def orders(
        self, agent_id: str, epoch: int, seen: str, wait: float, started: list[str]
    ) -> OrdersOut:
        body = {"agent_id": agent_id, "epoch": epoch, "seen": seen, "wait": wait, "started": started}
        return _read(OrdersOut, await self._post("orders", body))

    async def reports(self, agent_id: str, epoch: int, reports: list[dict[str, Any]]) -> ReportsOut:
        body = {"agent_id": agent_id, "epoch": epoch, "reports": reports}
        return _read(ReportsOut, await self._post("reports", body))

    async def ship_logs(
        self, agent_id: str, epoch: int, logs: KernelLogs, piece: Piece, eof: bool
    ) -> tuple[bool, bool]:
        """(stored, recorded): not stored when the kernel is not this agent's any more."""
        query = {
            "agent_id": agent_id,
            "epoch": epoch,
            "kernel_id": logs.kernel_id,
            "generation": logs.generation,
            "stream": piece.stream,
            "offset": piece.offset,
            "eof": eof,
        }
        reply = _read(LogsShipped, await self._post("logs", content=piece.data, params=query))
        return reply.stored, reply.recorded

    async def health(self, agent_id: str, epoch: int, schedulable: bool, reason: str | None) -> HealthOut:
        body = {
            "agent_id": agent_id,
            "epoch": epoch,
            "schedulable": schedulable,
            "unschedulable_reason": reason,
        }
        return _read(HealthOut, await self._post("health", body))

    async def leave(self, agent_id: str, epoch: int) -> None:
        await self._post("leave", {"agent_id": agent_id, "epoch": epoch})

    async def aclose(self) -> None:
        await self._http.aclose()
