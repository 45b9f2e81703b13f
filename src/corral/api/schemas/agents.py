"""An agent as an admin sees it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from corral.domain.records import AgentRecord


class AgentOut(BaseModel):
    id: str
    hostname: str
    address: str
    resource_group: str
    status: str
    epoch: int
    capacity: dict[str, float | int]
    used: dict[str, float | int]
    last_heartbeat: datetime
    info: dict[str, Any]

    @classmethod
    def of(cls, a: AgentRecord) -> AgentOut:
        return cls(
            id=a.id,
            hostname=a.hostname,
            address=a.address,
            resource_group=a.resource_group,
            status=a.status,
            epoch=a.epoch,
            capacity=a.capacity.to_public(),
            used=a.used.nonzero().to_public(),
            last_heartbeat=a.last_heartbeat,
            info=a.info,
        )
