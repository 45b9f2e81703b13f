"""One delivery attempt: the event signed per the Standard Webhooks spec and POSTed to its webhook.

The rules: connect within 5 s and finish within 15 s; redirects are not followed (a 3xx is a
failure); at most 1 KiB of the answer is kept; a host that resolves to a loopback, link-local or
private address is refused unless the cluster allows it (`webhooks.allow_private`).  The secret
signs and is never put in an error or a log line."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from datetime import datetime

import httpx
from standardwebhooks.webhooks import Webhook

from corral.domain.records import EventRecord
from corral.domain.webhooks import message_id_of
from corral.ssrf import refusal

CONNECT_TIMEOUT = 5.0
TOTAL_TIMEOUT = 15.0
KEEP_BYTES = 1024


@dataclass(frozen=True)
class Outcome:
    """What one attempt got: an answer's code and its first KiB, or why there was none."""

    code: int | None
    body: str | None
    error: str | None
    seconds: float

    @property
    def delivered(self) -> bool:
        return self.code is not None and 200 <= self.code < 300

    @property
    def gone(self) -> bool:
        return self.code == 410

    @property
    def result(self) -> str:
        if self.delivered:
            return "delivered"
        if self.gone:
            return "gone"
        return "refused" if self.code is None and (self.error or "").startswith("refused") else "failed"


def json_time(t: datetime) -> str:
    """A UTC time as pydantic writes it in the API's JSON ("2026-12-03T17:00:00.123456Z")."""
    return t.isoformat().replace("+00:00", "Z")


def event_json(e: EventRecord) -> dict[str, object]:
    """The event as `GET /events` returns it (api/schemas/events.EventOut): a webhook's `data`."""
    return {
        "id": e.id,
        "position": str(e.position),
        "type": e.kind,
        "entity_kind": e.entity_kind,
        "entity_id": e.entity_id,
        "project": e.project,
        "session_id": e.session_id,
        "from_status": e.from_status,
        "to_status": e.to_status,
        "payload": e.payload,
        "created_at": json_time(e.created_at),
    }


def body(event: EventRecord) -> str:
    return json.dumps(
        {"type": event.kind, "timestamp": json_time(event.created_at), "data": event_json(event)},
        separators=(",", ":"),
    )


def headers(event: EventRecord, payload: str, secrets: list[str], now: datetime) -> dict[str, str]:
    msg_id = message_id_of(event.position)
    signatures = " ".join(Webhook(s).sign(msg_id, now, payload) for s in secrets)
    return {
        "content-type": "application/json",
        "user-agent": "Corral-Webhooks/1",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signatures,
    }


class Sender:
    """Holds one HTTP client for every attempt; `shutdown()` closes it (idempotent)."""

    def __init__(self) -> None:
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(TOTAL_TIMEOUT, connect=CONNECT_TIMEOUT),
            follow_redirects=False,
            trust_env=False,
        )

    async def send(
        self, url: str, event: EventRecord, secrets: list[str], now: datetime, allow_private: bool
    ) -> Outcome:
        start = time.monotonic()
        why = await refusal(url, allow_private)
        if why is not None:
            return Outcome(None, None, why, time.monotonic() - start)
        payload = body(event)
        try:
            async with asyncio.timeout(TOTAL_TIMEOUT):
                request = self._client.build_request(
                    "POST", url, content=payload, headers=headers(event, payload, secrets, now)
                )
                answer = await self._client.send(request, stream=True)
                try:
                    kept = bytearray()
                    async for chunk in answer.aiter_raw():
                        kept += chunk
                        if len(kept) >= KEEP_BYTES:
                            break
                finally:
                    await answer.aclose()
        except TimeoutError:
            return Outcome(None, None, f"no answer within {TOTAL_TIMEOUT:g} s", time.monotonic() - start)
        except httpx.HTTPError as exc:
            # The exception's class and words, never the request (its headers carry signatures).
            return Outcome(None, None, f"{type(exc).__name__}: {exc}"[:300], time.monotonic() - start)
        text = bytes(kept[:KEEP_BYTES]).decode("utf-8", "replace")
        return Outcome(answer.status_code, text, None, time.monotonic() - start)

    async def shutdown(self) -> None:
        await self._client.aclose()
