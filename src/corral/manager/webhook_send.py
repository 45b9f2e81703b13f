"""One delivery attempt: the event signed per the Standard Webhooks spec and POSTed to its webhook.

The rules: connect within 5 s and finish within 15 s; redirects are not followed (a 3xx is a
failure); at most 1 KiB of the answer is kept; a host that resolves to a loopback, link-local or
private address is refused unless the cluster allows it (`webhooks.allow_private`).  The secret
signs and is never put in an error or a log line."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from standardwebhooks.webhooks import Webhook

from corral.domain.records import EventRecord
from corral.domain.webhooks import message_id_of
from corral.http1 import Broken, Refused, Upstream
from corral.ssrf import resolved

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
    """Keeps connections to receivers alive between attempts (corral/http1: an attempt costs a
    third of an httpx request's CPU); `shutdown()` closes them (idempotent)."""

    def __init__(self) -> None:
        self._http = Upstream()

    async def send(
        self, url: str, event: EventRecord, secrets: list[str], now: datetime, allow_private: bool
    ) -> Outcome:
        start = time.monotonic()
        checked = await resolved(url, allow_private)
        if isinstance(checked, str):
            return Outcome(None, None, checked, time.monotonic() - start)
        where, address = checked
        parts = urlsplit(url)
        secure = parts.scheme == "https"
        payload = body(event).encode()
        heads = [
            ("Host", parts.netloc),
            ("Content-Length", str(len(payload))),
            *headers(event, payload.decode(), secrets, now).items(),
        ]
        pool = f"{parts.scheme}://{where.host}:{where.port}@{address}"
        kept = bytearray()
        try:
            async with asyncio.timeout(TOTAL_TIMEOUT):
                answer = await self._http.send(
                    pool,
                    "POST",
                    (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                    heads,
                    _once(payload),
                    connect_to=(address, where.port),
                    tls=where.host if secure else None,
                )
                try:
                    async for chunk in answer.body():
                        kept += chunk
                        if len(kept) > KEEP_BYTES:
                            break  # the rest is not read: the connection is closed, not kept
                finally:
                    answer.release()
        except TimeoutError:
            return Outcome(None, None, f"no answer within {TOTAL_TIMEOUT:g} s", time.monotonic() - start)
        except (Refused, Broken) as exc:
            # The error's words, never the request (its headers carry signatures).
            kind = "ConnectError" if isinstance(exc, Refused) else "ProtocolError"
            return Outcome(None, None, f"{kind}: {exc}"[:300], time.monotonic() - start)
        text = bytes(kept[:KEEP_BYTES]).decode("utf-8", "replace")
        return Outcome(answer.status, text, None, time.monotonic() - start)

    async def shutdown(self) -> None:
        await self._http.aclose()


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
