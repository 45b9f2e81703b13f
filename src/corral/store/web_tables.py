"""The web UI's tables, on store/tables' metadata (which imports this module at its end)."""

from __future__ import annotations

from sqlalchemy import Column, Index, String, Table

from corral.store.dialect.types import UTCDateTime
from corral.store.tables import metadata

# A signed-in browser: the hash of its cookie's token, the API key it signed in with (by hash: a
# revoked key ends it), its CSRF token, and when it expires or was signed out.
web_sessions = Table(
    "web_sessions",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("key_hash", String(64), nullable=False),
    Column("csrf", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime, nullable=True),
    Index("ix_web_sessions_key", "key_hash"),
)

# Secrets the managers share: the cookie signing key (one row, made by whichever manager first
# needs it), so that a cookie any manager signed, every manager honours.
web_keys = Table(
    "web_keys",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("secret", String(128), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)
