"""Webhook deliveries: each enabled webhook's events, in commit order, at least once.

The rules.  A webhook's cursor passes an event only in the transaction that records its 2xx, so a
manager killed between the answer and that commit delivers the event again (at-least-once, the
same `webhook-id`), never loses it.  A failing event holds every later one back and is tried
again on the backoff schedule; a 410 disables the webhook at once, and an event still failing a
day after its first attempt disables it, with a `webhook.disabled` event and an audit row.  Each
webhook is delivered by one manager at a time: its lease (store/leases), whose epoch every write
of the deliverer checks, so a manager that lost it mid-attempt cannot move the cursor."""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import structlog

from corral.clock import utcnow
from corral.domain.events import Position, matching
from corral.domain.records import EventRecord
from corral.domain.webhooks import WebhookRecord, delay, given_up
from corral.manager.webhook_send import Outcome, Sender
from corral.metrics import WEBHOOK_BACKLOG, WEBHOOK_DELIVERIES, WEBHOOK_SECONDS
from corral.settings import ManagerSettings
from corral.store import config, journal, leases, outbox, webhooks
from corral.store.db import reading
from corral.store.unit import Engine, Tx

log = structlog.get_logger("corral.webhooks")

BATCH = 100
REDELIVERIES = 10
RECORD_BATCH = 50
"""Deliveries answered 2xx are recorded (and the cursor moved past them) this many at a time, or
sooner when a round ends or an event fails: at most this many are sent again after a kill -9."""


class Deliverer:
    """Starts a worker for each enabled webhook (and for those enabled later); `shutdown()` stops
    them and gives their leases up (idempotent)."""

    def __init__(self, engine: Engine, reader: Engine, settings: ManagerSettings, hold: bool = False) -> None:
        self._engine = engine
        self._reader = reader
        self._settings = settings
        self._holder = uuid.uuid4().hex[:16]
        self._hold = hold
        self._workers: dict[str, tuple[Worker, asyncio.Task[None]]] = {}
        self._sender: Sender | None = None

    async def run(self) -> None:
        self._sender = Sender()
        try:
            while True:
                try:
                    async with reading(self._reader) as conn:
                        ids = set(await webhooks.enabled_ids(conn))
                    self._reconcile(ids)
                except Exception:
                    log.exception("reading the webhooks failed")
                await asyncio.sleep(max(self._settings.webhook_poll * 5, 0.5))
        finally:
            await self.shutdown()

    def _reconcile(self, ids: set[str]) -> None:
        assert self._sender is not None
        for webhook_id, (_, task) in list(self._workers.items()):
            if task.done():
                del self._workers[webhook_id]
        for webhook_id in sorted(ids - set(self._workers)):
            worker = Worker(
                self._engine, self._reader, webhook_id, self._settings, self._sender, self._holder
            )
            worker.hold_after_delivery = self._hold
            self._workers[webhook_id] = (
                worker,
                asyncio.create_task(worker.run(), name=f"webhook:{webhook_id}"),
            )

    async def shutdown(self) -> None:
        workers, self._workers = list(self._workers.values()), {}
        for _, task in workers:
            task.cancel()
        await asyncio.gather(*(t for _, t in workers), return_exceptions=True)
        for worker, _ in workers:
            try:
                await worker.holding.release()
            except Exception:
                log.warning("a webhook lease was not given up; it runs out by itself", webhook=worker.id)
        if self._sender is not None:
            sender, self._sender = self._sender, None
            await sender.shutdown()


class Worker:
    """One webhook's deliveries, while this manager holds its lease."""

    def __init__(
        self,
        engine: Engine,
        reader: Engine,
        webhook_id: str,
        settings: ManagerSettings,
        sender: Sender,
        holder: str,
    ) -> None:
        self.id = webhook_id
        self._reader = reader
        self._settings = settings
        self._sender = sender
        ttl = timedelta(seconds=settings.webhook_lease)
        self.holding = leases.Holding(engine, f"webhook:{webhook_id}", holder, ttl)
        self.hold_after_delivery = False
        """Test fault: after a 2xx, wait before recording it (the suite kills the manager there)."""

    async def run(self) -> None:
        while True:
            try:
                wait = await self.round()
            except leases.LeaseLost:
                log.warning("webhook lease lost: another manager delivers it now", webhook=self.id)
                wait = self._settings.webhook_poll
            except Exception:
                log.exception("webhook delivery round failed", webhook=self.id)
                wait = 1.0
            if wait is None:
                await self.holding.release()
                try:
                    WEBHOOK_BACKLOG.remove(self.id)
                except KeyError:
                    pass
                return
            await asyncio.sleep(wait)

    async def round(self) -> float | None:
        """Deliver what is due; the seconds until the next round (None: the webhook is gone)."""
        if not await self.holding.claim():
            return self._settings.webhook_lease / 4
        async with reading(self._reader) as conn:
            hook = await webhooks.get(conn, self.id)
            if hook is None or not hook.enabled:
                return None
            allow = (await config.cluster_settings(conn)).webhooks_allow_private
            kinds = sorted({t for p in hook.events for t in matching(p)} | {"webhook.test"})
            found = await outbox.read(
                conn, hook.cursor, BATCH, outbox.Filter(kinds=kinds, project=hook.project)
            )
            again = await webhooks.deliveries(conn, self.id, REDELIVERIES, status="requeued")
            resent = await outbox.events(conn, [r.event_id for r in again])
            rows = await webhooks.deliveries_of(conn, self.id, [e.id for e in found])
        WEBHOOK_BACKLOG.labels(self.id).set(len(found))
        for redo in again:
            if redo.event_id in resent and (redo.next_attempt_at is None or redo.next_attempt_at <= utcnow()):
                if not await self._attempt(
                    hook, resent[redo.event_id], allow, redo.attempts, redo.first_attempt_at, "requeued"
                ):
                    return None
        batch = Batch()
        for event in found:
            row = rows.get(event.id)
            if (event.kind == "webhook.test" and event.entity_id != hook.id) or (
                row is not None and row.status == "delivered"  # by a manager that died before the cursor
            ):
                batch.passed = event.position  # not this webhook's to send (again)
                continue
            now = utcnow()
            if row is not None and row.next_attempt_at is not None and row.next_attempt_at > now:
                await self._write(batch)
                return min((row.next_attempt_at - now).total_seconds(), 60.0)
            if row is None:
                outcome, values = await self._try(hook, event, allow, 0, None)
                if outcome.delivered:  # the common case: recorded with the rest of its batch
                    batch.add(event, values)
                    if len(batch.delivered) >= RECORD_BATCH:
                        await self._write(batch)
                    continue
            else:
                outcome, values = await self._try(hook, event, allow, row.attempts, row.first_attempt_at)
            await self._write(batch)
            if not await self._record(hook, event, outcome, values, "pending"):
                return None
            if not outcome.delivered:
                return self._settings.webhook_poll  # held: retried when due
        await self._write(batch)
        return 0.0 if len(found) == BATCH else self._settings.webhook_poll

    async def _write(self, batch: Batch) -> None:
        """Record the batch's deliveries and move the cursor past them, in one fenced transaction."""
        if batch.delivered or batch.passed is not None:
            async with self.holding.transaction() as conn:
                if batch.delivered:
                    await webhooks.record_new(conn, self.id, batch.delivered)
                if batch.passed is not None:
                    await webhooks.advance(conn, self.id, batch.passed)
        batch.delivered.clear()
        batch.passed = None

    async def _try(
        self, hook: WebhookRecord, event: EventRecord, allow: bool, attempts: int, first: Any
    ) -> tuple[Outcome, dict[str, Any]]:
        """One attempt and the delivery row's values after it (not yet written)."""
        now = utcnow()
        outcome = await self._sender.send(hook.url, event, hook.secrets(now), now, allow)
        WEBHOOK_DELIVERIES.labels(outcome.result).inc()
        if outcome.code is not None:
            WEBHOOK_SECONDS.observe(outcome.seconds)
        if outcome.delivered and self.hold_after_delivery:
            await asyncio.sleep(3600)
        done = utcnow()
        values: dict[str, Any] = {
            "attempts": attempts + 1,
            "first_attempt_at": first or now,
            "last_attempt_at": now,
            "response_code": outcome.code,
            "response_body": outcome.body,
            "error": outcome.error,
            "latency_ms": outcome.seconds * 1000.0,
        }
        if outcome.delivered:
            values |= {"status": "delivered", "delivered_at": done, "next_attempt_at": None}
        return outcome, values

    async def _attempt(
        self,
        hook: WebhookRecord,
        event: EventRecord,
        allow: bool,
        attempts: int,
        first: Any,
        retrying: str = "pending",
    ) -> bool:
        """One attempt, recorded; False when it disabled the webhook."""
        outcome, values = await self._try(hook, event, allow, attempts, first)
        return await self._record(hook, event, outcome, values, retrying)

    async def _record(
        self, hook: WebhookRecord, event: EventRecord, outcome: Outcome, values: dict[str, Any], retrying: str
    ) -> bool:
        """Write an attempt's outcome (a failure: when to try again, or that the webhook is done
        for); False when it disabled the webhook."""
        done, limit = values["last_attempt_at"], timedelta(seconds=self._settings.webhook_give_up)
        disable: str | None = None
        if outcome.delivered:
            pass
        elif outcome.gone:
            values |= {"status": "failed", "next_attempt_at": None}
            disable = "the receiver answered 410 Gone"
        elif given_up(values["first_attempt_at"], utcnow(), limit):
            values |= {"status": "failed", "next_attempt_at": None}
            if retrying == "pending":
                disable = f"event {event.position} still failing after {self._settings.webhook_give_up:g} s"
        else:
            wait = delay(values["attempts"], self._settings.webhook_backoff, random.uniform(-1.0, 1.0))
            values |= {"status": retrying, "next_attempt_at": done + timedelta(seconds=wait)}
        async with self.holding.transaction() as conn:
            await webhooks.record(conn, self.id, event, values)
            if outcome.delivered and retrying == "pending":
                await webhooks.advance(conn, self.id, event.position)
            if disable is not None:
                await _disable(conn, hook, event, outcome, disable)
        if disable is not None:
            log.warning("webhook disabled", webhook=self.id, reason=disable)
        return disable is None


@dataclass
class Batch:
    """Deliveries answered 2xx at their first attempt, not yet recorded, and how far the cursor
    may move once they are (past them, and past events not this webhook's to send)."""

    delivered: list[tuple[EventRecord, dict[str, Any]]] = field(default_factory=list)
    passed: Position | None = None

    def add(self, event: EventRecord, values: dict[str, Any]) -> None:
        self.delivered.append((event, values))
        self.passed = event.position


async def _disable(conn: Tx, hook: WebhookRecord, event: EventRecord, outcome: Outcome, reason: str) -> None:
    now = utcnow()
    await webhooks.change(conn, hook.id, {"enabled": False, "disabled_reason": reason, "updated_at": now})
    payload = {"reason": reason, "event_id": event.id, "response_code": outcome.code}
    await journal.add_events(
        conn, [journal.entity_event("webhook", hook.id, hook.project, "webhook.disabled", payload)], now
    )
    await config.audit(conn, "system", "webhook.disable", hook.id, reason, now)
