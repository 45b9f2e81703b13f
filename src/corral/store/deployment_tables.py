"""The deployments' tables, on store/tables' metadata (which imports this module at its end)."""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, Float, ForeignKey, Index, Integer, String, Table, Text, false

from corral.store.dialect.types import BigId, UTCDateTime
from corral.store.tables import ID, metadata

# A deployment: `replicas` copies of its current revision's session spec behind routes.  Requests
# (scale, delete, rollout) change the row; the handlers act on them (DESIGN §7).
deployments = Table(
    "deployments",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", String(63), nullable=False, unique=True),
    Column("project", String(128), nullable=False),
    Column("owner", String(128), nullable=False),
    Column("status", String(16), nullable=False),
    Column("status_changed_at", UTCDateTime, nullable=False),
    Column("replicas", Integer, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("public", Boolean, nullable=False),
    Column("max_surge", String(8), nullable=False),
    Column("max_unavailable", String(8), nullable=False),
    Column("drain_timeout", Float, nullable=False),
    Column("progress_deadline", Float, nullable=False),
    # The rollout to `revision`, while routes of an older one live: since when, and whether it was
    # stopped at its progress deadline (the old routes go on serving).
    Column("rollout_started_at", UTCDateTime, nullable=True),
    Column("rollout_stalled", Boolean, nullable=False, server_default=false()),
    # Replicas that ended in a row without becoming healthy: the next one waits (domain/rollout).
    Column("ended_in_a_row", Integer, nullable=False, server_default="0"),
    Column("next_replica_at", UTCDateTime, nullable=True),
    Column("delete_requested_at", UTCDateTime, nullable=True),
    Column("message", Text, nullable=False, server_default=""),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

# What each revision runs: the replicas' session spec and health check, as created.
deployment_revisions = Table(
    "deployment_revisions",
    metadata,
    Column("deployment_id", ID, ForeignKey("deployments.id", ondelete="CASCADE"), primary_key=True),
    Column("number", Integer, primary_key=True),
    Column("key", String(64), nullable=False),
    Column("session", JSON, nullable=False),
    Column("health", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

# One replica: its session, where it listens (its agent's host and the port it chose), its last
# health report (the agent's counts in a row), and whether the proxy sends it traffic.
routes = Table(
    "routes",
    metadata,
    Column("id", ID, primary_key=True),
    Column("deployment_id", ID, ForeignKey("deployments.id", ondelete="CASCADE"), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("session_id", ID, nullable=False, unique=True),
    Column("status", String(16), nullable=False),
    Column("status_changed_at", UTCDateTime, nullable=False),
    Column("host", String(255), nullable=True),
    Column("port", Integer, nullable=True),
    Column("in_traffic", Boolean, nullable=False),
    Column("draining_since", UTCDateTime, nullable=True),
    # A draining route some manager's proxy still has requests open on, until then (renewed each
    # second while they are): the drain waits for it (manager/deployment_handlers/drain_route.py).
    Column("held_until", UTCDateTime, nullable=True),
    Column("started_at", UTCDateTime, nullable=True),
    Column("health_ok", Integer, nullable=False, server_default="0"),
    Column("health_failed", Integer, nullable=False, server_default="0"),
    Column("health_at", UTCDateTime, nullable=True),
    Column("health_detail", String(256), nullable=False, server_default=""),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_routes_deployment", "deployment_id", "status"),
)

# Every handler outcome for a deployment or one of its routes (as session_history for sessions);
# repeats of one outcome collapse into a count.
deployment_history = Table(
    "deployment_history",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("deployment_id", ID, nullable=False, index=True),
    Column("route_id", ID, nullable=True),
    Column("handler", String(64), nullable=False),
    Column("result", String(16), nullable=False),
    Column("from_status", String(16), nullable=False),
    Column("to_status", String(16), nullable=True),
    Column("message", Text, nullable=False),
    Column("count", Integer, nullable=False, default=1),
    Column("created_at", UTCDateTime, nullable=False),
    Column("last_at", UTCDateTime, nullable=False),
)
