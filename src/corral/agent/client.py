"""The agent protocol client: the only way an agent talks to the manager.

Every request is a protocol model, sent as its JSON; every reply is read into its model, and one
this agent does not understand is refused, not guessed at.
"""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from corral.protocol.logs import LogShipment, LogsShipped
from corral.protocol.messages import HealthIn, HealthOut, LeaveIn, RegisterIn, RegisterOut
from corral.protocol.orders import OrdersIn, OrdersOut
from corral.protocol.replicas import ReplicasIn, ReplicasOut
from corral.protocol.reports import ReportsIn, ReportsOut

Reply = TypeVar("Reply", bound=BaseModel)


class Fenced(Exception):
    """The manager refused this agent's epoch: everything it runs must stop, then re-register."""


class Refused(Exception):
    """The manager said no for a reason this agent must show its operator (e.g. a duplicate id)."""


class Rejected(Exception):
    """The manager refused a message as malformed (4xx): sending it again cannot help."""


class ManagerUnreachable(Exception):
    """No answer (network, manager down, or a 5xx)."""


class _Error(BaseModel):
    """The manager's error envelope (api/errors.py), as far as the agent reads it: the rest of it
    is the API's, for people, and ignored here."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    code: str = ""
    message: str = ""


class _Failure(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    error: _Error = _Error()


def _read(model: type[Reply], data: Any) -> Reply:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise Rejected(f"unreadable reply from the manager: {exc}") from exc


def _failure(resp: httpx.Response) -> _Error:
    try:
        return _Failure.model_validate_json(resp.content).error
    except ValidationError:
        return _Error(message=resp.text)


def _wire(body: BaseModel) -> dict[str, Any]:
    """A request's JSON: fields at their defaults left out (the manager reads the same defaults),
    which keeps a batch of reports as small as the transitions it says."""
    return body.model_dump(mode="json", exclude_defaults=True)


class ProtocolClient:
    def __init__(self, base_url: str, token: str) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(10.0, read=70.0),
        )

    async def _post(self, path: str, body: dict[str, Any] | None = None, **raw: Any) -> Any:
        try:
            resp = await self._http.post(f"/api/v1/agent/{path}", json=body, **raw)
        except httpx.HTTPError as exc:
            raise ManagerUnreachable(repr(exc)) from exc
        if resp.status_code == 409:
            error = _failure(resp)
            if error.code == "fenced":
                raise Fenced(error.message)
            raise Refused(error.message or resp.text)
        if resp.status_code >= 500:
            raise ManagerUnreachable(f"{resp.status_code} from the manager")
        if resp.status_code >= 400:
            raise Rejected(f"manager refused {path}: {resp.status_code} {resp.text[:500]}")
        return resp.json() if resp.content else None

    async def register(self, body: RegisterIn) -> RegisterOut:
        return _read(RegisterOut, await self._post("register", _wire(body)))

    async def orders(self, body: OrdersIn) -> OrdersOut:
        return _read(OrdersOut, await self._post("orders", _wire(body)))

    async def reports(self, body: ReportsIn) -> ReportsOut:
        return _read(ReportsOut, await self._post("reports", _wire(body)))

    async def ship_logs(self, shipment: LogShipment, data: bytes) -> LogsShipped:
        """Not stored when the kernel is not this agent's any more."""
        query = shipment.model_dump(mode="json")
        return _read(LogsShipped, await self._post("logs", content=data, params=query))

    async def health(self, body: HealthIn) -> HealthOut:
        return _read(HealthOut, await self._post("health", _wire(body)))

    async def replicas(self, body: ReplicasIn) -> ReplicasOut:
        return _read(ReplicasOut, await self._post("replicas", _wire(body)))

    async def leave(self, body: LeaveIn) -> None:
        await self._post("leave", _wire(body))

    async def aclose(self) -> None:
        await self._http.aclose()
