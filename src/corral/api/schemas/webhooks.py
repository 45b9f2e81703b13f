"""Webhooks and their deliveries as a client sends and reads them (never the secret, but once)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from corral.domain.webhooks import MAX_URL, DeliveryRecord, WebhookRecord, message_id_of
from corral.protocol.types import STRICT, Name, Text, Text256

# Longer URLs reach the service's check, which names the rule (2 KiB) in its 422.
Url = Annotated[str, StringConstraints(min_length=1, max_length=4 * MAX_URL)]
Pattern = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Patterns = Annotated[list[Pattern], Field(min_length=1, max_length=64)]


class WebhookIn(BaseModel):
    model_config = STRICT

    url: Url = Field(description="http(s) URL events are POSTed to (no credentials, at most 2 KiB)")
    events: Patterns = Field(description="event types, globs allowed (`session.retry_*`); see /events")
    project: Name | None = Field(None, description="only this project's events (required unless admin)")
    description: Text256 = ""
    enabled: bool = True


class WebhookPatch(BaseModel):
    """Only the fields given change."""

    model_config = STRICT

    url: Url | None = None
    events: Patterns | None = None
    project: Name | None = None
    description: Text256 | None = None
    enabled: bool | None = None


class WebhookOut(BaseModel):
    id: str
    url: str
    events: list[str]
    project: str | None
    description: str
    enabled: bool
    disabled_reason: Text | None = Field(description="why it was disabled (410 Gone, a day of failures)")
    position: str = Field(description="the last event delivered (or not this webhook's) in commit order")
    previous_secret_until: datetime | None = Field(description="a rotated-out secret also signs until then")
    created_by: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, w: WebhookRecord) -> WebhookOut:
        return cls(
            id=w.id,
            url=w.url,
            events=w.events,
            project=w.project,
            description=w.description,
            enabled=w.enabled,
            disabled_reason=w.disabled_reason,
            position=str(w.cursor),
            previous_secret_until=w.previous_until if w.previous_secret else None,
            created_by=w.created_by,
            created_at=w.created_at,
            updated_at=w.updated_at,
        )


class WebhookSecretOut(WebhookOut):
    secret: str = Field(description="`whsec_...`: shown in this answer only; verify deliveries with it")


class DeliveryOut(BaseModel):
    event_id: int
    position: str
    event_type: str
    webhook_id: str = Field(description="the `webhook-id` header: the same on every delivery of the event")
    status: str = Field(description="pending (to be tried again), delivered, failed (given up), requeued")
    attempts: int
    first_attempt_at: datetime | None
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    response_code: int | None
    response_body: Text | None = Field(description="the first KiB of the last answer")
    error: Text | None = Field(description="why the last attempt got no answer")
    latency_ms: float | None
    delivered_at: datetime | None

    @classmethod
    def of(cls, r: DeliveryRecord) -> DeliveryOut:
        return cls(
            event_id=r.event_id,
            position=str(r.position),
            event_type=r.event_type,
            webhook_id=message_id_of(r.position),
            status=r.status,
            attempts=r.attempts,
            first_attempt_at=r.first_attempt_at,
            last_attempt_at=r.last_attempt_at,
            next_attempt_at=r.next_attempt_at,
            response_code=r.response_code,
            response_body=r.response_body,
            error=r.error,
            latency_ms=r.latency_ms,
            delivered_at=r.delivered_at,
        )
