"""Webhooks as rules: what a target URL may be, which addresses are private, and when a failed
delivery is tried again or given up (pure: the clock and the randomness are passed in)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from corral.domain.events import Position

MAX_URL = 2048
BACKOFF = (5.0, 30.0, 120.0, 600.0, 3600.0)
"""Seconds before each retry of a failing event (5 s, 30 s, 2 min, 10 min, 1 h), then the last,
hourly, until GIVE_UP has passed since its first attempt."""
GIVE_UP = timedelta(hours=24)
JITTER = 0.1
"""Each delay is stretched or shrunk by up to this fraction, so receivers that failed together are
not all retried in the same instant."""


class BadTarget(ValueError):
    """A URL no webhook may have; the message says why."""


@dataclass(frozen=True)
class Target:
    url: str
    host: str
    port: int


def target(url: str) -> Target:
    """A webhook's URL checked: http(s), a host, no credentials, at most 2 KiB."""
    if len(url.encode()) > MAX_URL:
        raise BadTarget(f"at most {MAX_URL} bytes")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BadTarget(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise BadTarget("must be http:// or https://")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise BadTarget("must not carry credentials (user:password@): the signature authenticates")
    if not parts.hostname:
        raise BadTarget("has no host")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise BadTarget("must not contain spaces or control characters")
    return Target(url, parts.hostname, port or (443 if parts.scheme == "https" else 80))


def message_id_of(position: Position) -> str:
    """An event's `webhook-id`: the same on every delivery of it, so receivers deduplicate on it."""
    return f"msg_{position}"


def private(address: str) -> bool:
    """Whether a resolved address is one an SSRF guard keeps webhooks from: loopback, link-local,
    private ranges, and the unspecified, multicast and reserved ones (IPv4 inside IPv6 too)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def delay(attempts: int, schedule: Sequence[float], spread: float) -> float:
    """Seconds before the next try after `attempts` failed ones (1 after the first), with
    `spread` in [-1, 1] choosing where in the jitter band it falls."""
    base = schedule[min(attempts, len(schedule)) - 1]
    return max(0.0, base * (1.0 + JITTER * spread))


def given_up(first_attempt: datetime, now: datetime, limit: timedelta = GIVE_UP) -> bool:
    """An event failing since `first_attempt` is given up (and its webhook disabled) at `limit`."""
    return now - first_attempt >= limit


@dataclass(frozen=True)
class WebhookRecord:
    id: str
    url: str
    events: list[str]
    project: str | None
    description: str
    enabled: bool
    disabled_reason: str | None
    secret: str
    previous_secret: str | None
    previous_until: datetime | None
    cursor_txid: int
    cursor_id: int
    created_by: str
    created_at: datetime
    updated_at: datetime

    @property
    def cursor(self) -> Position:
        """The last event delivered or passed by: delivery goes on after it."""
        return Position(self.cursor_txid, self.cursor_id)

    def secrets(self, now: datetime) -> list[str]:
        """The secrets that sign now: the current one, and a rotated-out one for its grace."""
        keep = self.previous_secret and self.previous_until and now < self.previous_until
        return [self.secret, self.previous_secret] if keep else [self.secret]  # type: ignore[list-item]


@dataclass(frozen=True)
class DeliveryRecord:
    id: int
    webhook_id: str
    event_id: int
    event_txid: int
    event_type: str
    status: str
    """pending (tried, to be tried again), delivered, or failed (given up)"""
    attempts: int
    first_attempt_at: datetime | None
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    response_code: int | None
    response_body: str | None
    error: str | None
    latency_ms: float | None
    delivered_at: datetime | None

    @property
    def position(self) -> Position:
        return Position(self.event_txid, self.event_id)
