"""Events as a client reads them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from corral.domain.records import EventRecord


class EventOut(BaseModel):
    id: int
    session_id: str
    type: str
    from_status: str | None
    to_status: str | None
    payload: dict[str, Any]
    created_at: datetime

    @classmethod
    def of(cls, e: EventRecord) -> EventOut:
        return cls(
            id=e.id,
            session_id=e.session_id,
            type=e.kind,
            from_status=e.from_status,
            to_status=e.to_status,
            payload=e.payload,
            created_at=e.created_at,
        )
