"""Webhooks as a caller manages them: admins' may be cluster-wide, a member's belong to one of their
projects; nobody sees or changes another project's.  The secret is shown once, at creation (and
at a rotation), never again."""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from corral.clock import utcnow
from corral.domain.records import Principal
from corral.domain.webhooks import BadTarget, DeliveryRecord, WebhookRecord, target
from corral.services.errors import Forbidden, InvalidInput, NotFound
from corral.services.events import kinds
from corral.ssrf import refusal
from corral.store import auth, config, journal, outbox, webhooks
from corral.store.db import reading, transaction
from corral.store.unit import Engine

ROTATION_GRACE = timedelta(hours=24)
"""A rotated-out secret keeps signing this long beside the new one (two signatures)."""


@dataclass(frozen=True)
class Made:
    """A webhook and its secret, which only this answer shows."""

    webhook: WebhookRecord
    secret: str


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def _patterns(events: list[str]) -> list[str]:
    try:
        kinds(tuple(events))
    except InvalidInput as exc:
        raise InvalidInput("events", exc.message.replace("type:", "events:", 1)) from None
    return list(dict.fromkeys(events))


async def _checked_url(engine: Engine, url: str) -> str:
    try:
        target(url)
    except BadTarget as exc:
        raise InvalidInput("url", f"url: {exc}") from None
    async with reading(engine) as conn:
        allow = (await config.cluster_settings(conn)).webhooks_allow_private
    why = await refusal(url, allow)
    if why is not None:
        raise InvalidInput("url", f"url: {why}")
    return url


async def _may_own(engine: Engine, who: Principal, project: str | None) -> None:
    if project is None and not who.is_admin:
        raise InvalidInput("project", "project: a member's webhook names one of their projects")
    if project is not None and not who.is_admin and project not in who.projects:
        raise Forbidden(f"not a member of project {project[:80]}", {"field": "project"})
    if project is not None:
        async with reading(engine) as conn:
            if not await auth.project_exists(conn, project):
                raise InvalidInput("project", f"project: no project {project[:80]!r}")


async def create(
    engine: Engine,
    who: Principal,
    url: str,
    events: list[str],
    project: str | None,
    description: str,
    enabled: bool,
) -> Made:
    await _may_own(engine, who, project)
    patterns = _patterns(events)
    await _checked_url(engine, url)
    now = utcnow()
    async with reading(engine) as conn:
        start = await outbox.newest(conn)  # it delivers what happens from now on
    secret = new_secret()
    values: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "url": url,
        "events": patterns,
        "project": project,
        "description": description,
        "enabled": enabled,
        "disabled_reason": None,
        "secret": secret,
        "previous_secret": None,
        "previous_until": None,
        "cursor_txid": start.txid,
        "cursor_id": start.id,
        "created_by": who.name,
        "created_at": now,
        "updated_at": now,
    }
    async with transaction(engine) as conn:
        await webhooks.add(conn, values)
        await config.audit(conn, who.name, "webhook.create", values["id"], f"to {_host(url)}", now)
    return Made(WebhookRecord(**values), secret)


def _host(url: str) -> str:
    try:
        return target(url).host
    except BadTarget:
        return "?"


async def listed(engine: Engine, who: Principal) -> list[WebhookRecord]:
    async with reading(engine) as conn:
        return await webhooks.listed(conn, None if who.is_admin else sorted(who.projects))


async def get(engine: Engine, who: Principal, webhook_id: str) -> WebhookRecord:
    """404 for a webhook the caller may not see, as for one that does not exist."""
    async with reading(engine) as conn:
        hook = await webhooks.get(conn, webhook_id)
    if hook is None or not (who.is_admin or hook.project in who.projects):
        raise NotFound(f"no webhook {webhook_id[:64]}")
    return hook


async def update(
    engine: Engine, who: Principal, webhook_id: str, changes: Mapping[str, Any]
) -> WebhookRecord:
    hook = await get(engine, who, webhook_id)
    values = dict(changes)
    if "url" in values:
        await _checked_url(engine, values["url"])
    if "events" in values:
        values["events"] = _patterns(values["events"])
    if "project" in values:
        await _may_own(engine, who, values["project"])
    now = utcnow()
    values["updated_at"] = now
    if values.get("enabled") and not hook.enabled:
        values["disabled_reason"] = None
    async with transaction(engine) as conn:
        if values.get("enabled") and not hook.enabled:
            # A day of failures is counted afresh from the next attempt.
            await webhooks.restart_failures(conn, webhook_id)
        await webhooks.change(conn, webhook_id, values)
        await config.audit(conn, who.name, "webhook.update", webhook_id, ", ".join(sorted(changes)), now)
    return replace(hook, **values)


async def delete(engine: Engine, who: Principal, webhook_id: str) -> None:
    await get(engine, who, webhook_id)
    async with transaction(engine) as conn:
        await webhooks.remove(conn, webhook_id)
        await config.audit(conn, who.name, "webhook.delete", webhook_id, "deleted", utcnow())


async def rotate(engine: Engine, who: Principal, webhook_id: str) -> Made:
    """A new secret; the old one signs too for ROTATION_GRACE, so receivers can switch over."""
    hook = await get(engine, who, webhook_id)
    now = utcnow()
    secret = new_secret()
    values: dict[str, Any] = {
        "secret": secret,
        "previous_secret": hook.secret,
        "previous_until": now + ROTATION_GRACE,
    }
    async with transaction(engine) as conn:
        await webhooks.change(conn, webhook_id, {**values, "updated_at": now})
        await config.audit(conn, who.name, "webhook.rotate", webhook_id, "secret rotated", now)
    return Made(replace(hook, **values, updated_at=now), secret)


async def test(engine: Engine, who: Principal, webhook_id: str) -> None:
    """A `webhook.test` event, delivered to this webhook alone like any other event."""
    hook = await get(engine, who, webhook_id)
    if not hook.enabled:
        raise InvalidInput(
            "enabled", "the webhook is disabled: enable it first (corral webhook update --enable)"
        )
    now = utcnow()
    payload = {"requested_by": who.name}
    async with transaction(engine) as conn:
        await journal.add_events(
            conn, [journal.entity_event("webhook", hook.id, hook.project, "webhook.test", payload)], now
        )


async def deliveries(
    engine: Engine, who: Principal, webhook_id: str, limit: int, status: str | None
) -> list[DeliveryRecord]:
    await get(engine, who, webhook_id)
    async with reading(engine) as conn:
        return await webhooks.deliveries(conn, webhook_id, limit, status)


async def redeliver(engine: Engine, who: Principal, webhook_id: str, event_id: int) -> DeliveryRecord:
    """Send an event again (out of order: the cursor does not move back); the same webhook-id."""
    await get(engine, who, webhook_id)
    async with transaction(engine) as conn:
        row = await webhooks.delivery(conn, webhook_id, event_id)
        if row is None:
            raise NotFound(f"webhook {webhook_id[:64]} has no delivery of event {event_id}")
        values: dict[str, Any] = {"status": "requeued", "next_attempt_at": None, "first_attempt_at": None}
        await webhooks.change_delivery(conn, row.id, values)
        await config.audit(conn, who.name, "webhook.redeliver", webhook_id, f"event {event_id}", utcnow())
    return replace(row, **values)
