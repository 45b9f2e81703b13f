"""The webhooks' tables, on store/tables' metadata (which imports this module at its end)."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
)

from corral.store.dialect.types import BigId, UTCDateTime
from corral.store.tables import metadata

# Where events are sent: a URL, the event types (globs) and optionally one project; the cursor is
# the position of the last event delivered (or passed by) in commit order.
webhooks = Table(
    "webhooks",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("url", Text, nullable=False),
    Column("events", JSON, nullable=False),
    Column("project", String(128), nullable=True),
    Column("description", String(256), nullable=False, server_default=""),
    Column("enabled", Boolean, nullable=False),
    Column("disabled_reason", Text, nullable=True),
    Column("secret", String(128), nullable=False),
    Column("previous_secret", String(128), nullable=True),
    Column("previous_until", UTCDateTime, nullable=True),
    Column("cursor_txid", BigInteger, nullable=False, server_default="0"),
    Column("cursor_id", BigInteger, nullable=False, server_default="0"),
    Column("created_by", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

# Each event's delivery to one webhook: attempts, the last answer, and when the next try is due.
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("webhook_id", String(36), ForeignKey("webhooks.id", ondelete="CASCADE"), nullable=False),
    Column("event_id", BigInteger, nullable=False),
    Column("event_txid", BigInteger, nullable=False),
    Column("event_type", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("first_attempt_at", UTCDateTime, nullable=True),
    Column("last_attempt_at", UTCDateTime, nullable=True),
    Column("next_attempt_at", UTCDateTime, nullable=True),
    Column("response_code", Integer, nullable=True),
    Column("response_body", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("latency_ms", Float, nullable=True),
    Column("delivered_at", UTCDateTime, nullable=True),
    Index("uq_webhook_deliveries_event", "webhook_id", "event_id", unique=True),
)
