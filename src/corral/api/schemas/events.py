"""Events as a client reads them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from corral.domain.records import EventRecord


class EventOut(BaseModel):
    id: int
    position: str = Field(
        description="where this event is in commit order: give it as `after` (or `Last-Event-ID`) to read on"
    )
    type: str
    entity_kind: str = Field(description="what the event is about: session, webhook")
    entity_id: str
    project: str | None = Field(description="whose: only its members read it (none: admins only)")
    session_id: str | None
    from_status: str | None
    to_status: str | None
    payload: dict[str, Any]
    created_at: datetime

    @classmethod
    def of(cls, e: EventRecord) -> EventOut:
        return cls(
            id=e.id,
            position=str(e.position),
            type=e.kind,
            entity_kind=e.entity_kind,
            entity_id=e.entity_id,
            project=e.project,
            session_id=e.session_id,
            from_status=e.from_status,
            to_status=e.to_status,
            payload=e.payload,
            created_at=e.created_at,
        )
