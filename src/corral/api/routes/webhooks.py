"""/api/v1/webhooks: where events are POSTed, signed (Standard Webhooks), and how that went.

Admins' webhooks may be cluster-wide; a member's belong to one of their projects, and only that
project's members see them."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response

from corral.api.schemas.webhooks import DeliveryOut, WebhookIn, WebhookOut, WebhookPatch, WebhookSecretOut
from corral.api.state import Caller, State
from corral.protocol.types import INT64_MAX
from corral.services import webhooks as svc
from corral.services.webhooks import Made

router = APIRouter(prefix="/api/v1/webhooks", tags=["webhooks"])


def _shown(made: Made) -> WebhookSecretOut:
    return WebhookSecretOut(**WebhookOut.of(made.webhook).model_dump(), secret=made.secret)


@router.post(
    "",
    status_code=201,
    response_model=WebhookSecretOut,
    description="The answer shows the signing secret; no later answer does (rotate it to get a new one).",
)
async def create_webhook(body: WebhookIn, who: Caller, state: State) -> WebhookSecretOut:
    made = await svc.create(
        state.engine, who, body.url, body.events, body.project, body.description, body.enabled
    )
    return _shown(made)


@router.get("", response_model=list[WebhookOut])
async def list_webhooks(who: Caller, state: State) -> list[WebhookOut]:
    return [WebhookOut.of(w) for w in await svc.listed(state.reader, who)]


@router.get("/{webhook_id}", response_model=WebhookOut)
async def get_webhook(webhook_id: str, who: Caller, state: State) -> WebhookOut:
    return WebhookOut.of(await svc.get(state.reader, who, webhook_id))


@router.patch("/{webhook_id}", response_model=WebhookOut, description="Enabling it again retries at once.")
async def update_webhook(webhook_id: str, body: WebhookPatch, who: Caller, state: State) -> WebhookOut:
    changes = body.model_dump(exclude_unset=True)
    for key in ("url", "events", "enabled", "description"):
        if key in changes and changes[key] is None:
            del changes[key]
    return WebhookOut.of(await svc.update(state.engine, who, webhook_id, changes))


@router.delete("/{webhook_id}", status_code=204)
async def delete_webhook(webhook_id: str, who: Caller, state: State) -> Response:
    await svc.delete(state.engine, who, webhook_id)
    return Response(status_code=204)


@router.post(
    "/{webhook_id}/rotate-secret",
    response_model=WebhookSecretOut,
    description="A new secret; the old one keeps signing for 24 h beside it (two signatures).",
)
async def rotate_secret(webhook_id: str, who: Caller, state: State) -> WebhookSecretOut:
    return _shown(await svc.rotate(state.engine, who, webhook_id))


@router.post(
    "/{webhook_id}/test",
    status_code=202,
    description="Queue a `webhook.test` event for this webhook alone; see its deliveries for the result.",
)
async def test_webhook(webhook_id: str, who: Caller, state: State) -> dict[str, bool]:
    await svc.test(state.engine, who, webhook_id)
    return {"queued": True}


@router.get("/{webhook_id}/deliveries", response_model=list[DeliveryOut], description="The latest first.")
async def list_deliveries(
    webhook_id: str,
    who: Caller,
    state: State,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    status: Literal["pending", "delivered", "failed", "requeued"] | None = None,
) -> list[DeliveryOut]:
    return [DeliveryOut.of(d) for d in await svc.deliveries(state.reader, who, webhook_id, limit, status)]


@router.post(
    "/{webhook_id}/deliveries/{event_id}/redeliver",
    status_code=202,
    response_model=DeliveryOut,
    description="Send this event again, with the same `webhook-id`; later events do not wait for it.",
)
async def redeliver(
    webhook_id: str, event_id: Annotated[int, Path(ge=0, le=INT64_MAX)], who: Caller, state: State
) -> DeliveryOut:
    return DeliveryOut.of(await svc.redeliver(state.engine, who, webhook_id, event_id))
