"""Table definitions: the only place the schema is written (Alembic diffs against it)."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Computed,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)

from corral.domain.status import TERMINAL_KERNEL
from corral.store.dialect.types import BigId as BigId
from corral.store.dialect.types import UTCDateTime as UTCDateTime  # migrations name it here

metadata: MetaData = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = String(36)

users = Table(
    "users",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("role", String(16), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("config", JSON, nullable=True),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", ID, primary_key=True),
    Column("user_id", ID, ForeignKey("users.id"), nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("prefix", String(16), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

projects = Table(
    "projects",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("config", JSON, nullable=False, default=dict),
    Column("created_at", UTCDateTime, nullable=False),
)

project_members = Table(
    "project_members",
    metadata,
    Column("project_id", ID, ForeignKey("projects.id"), primary_key=True),
    Column("user_id", ID, ForeignKey("users.id"), primary_key=True),
)

resource_groups = Table(
    "resource_groups",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("config", JSON, nullable=False, default=dict),
    Column("created_at", UTCDateTime, nullable=False),
)

agents = Table(
    "agents",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("hostname", String(255), nullable=False),
    Column("address", String(255), nullable=False),
    Column("resource_group", String(64), ForeignKey("resource_groups.name"), nullable=False),
    Column("status", String(16), nullable=False),
    Column("epoch", Integer, nullable=False, default=0),
    Column("capacity", JSON, nullable=False),
    Column("info", JSON, nullable=False, default=dict),
    Column("last_heartbeat", UTCDateTime, nullable=False),
    Column("registered_at", UTCDateTime, nullable=False),
    Column("lost_at", UTCDateTime, nullable=True),
)

FILLFACTOR = 70
"""Percent of a PostgreSQL page its inserts fill, for sessions and kernels (migration 0009): their
rows change status several times each, and a kernel's new version on the same page is heap-only,
with no index entry."""

sessions = Table(
    "sessions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", String(255), nullable=False),
    Column("type", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("status_changed_at", UTCDateTime, nullable=False),
    Column("result", String(16), nullable=False),
    Column("cause", String(32), nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("root_rank", Integer, nullable=True),
    Column("priority", Integer, nullable=False),
    Column("resource_group", String(64), ForeignKey("resource_groups.name"), nullable=False),
    Column("project", String(128), nullable=False),
    Column("owner", String(128), nullable=False),
    Column("cluster_size", Integer, nullable=False),
    Column("resources", JSON, nullable=False),
    Column("placement", String(16), nullable=False),
    Column("command", JSON, nullable=False),
    Column("env", JSON, nullable=False),
    Column("image", String(255), nullable=True),
    Column("timeout", Integer, nullable=True),
    Column("error_strategy", String(32), nullable=False),
    Column("retry_policy", JSON, nullable=True),
    Column("retry_policies", JSON, nullable=False),
    Column("creation_id", String(255), nullable=True),
    Column("spec_hash", String(64), nullable=True),
    # A job array's elements share its id (ix_sessions_array_id below); each keeps its index on retry.
    Column("array_id", ID, nullable=True),
    Column("array_index", Integer, nullable=True),
    Column("workdir", Text, nullable=True),  # where kernels start (None: their own directories)
    # At most one child per session (ix_sessions_parent_session_id below): two managers or a
    # replayed event can never make two retries.
    Column("parent_session_id", ID, nullable=True),
    Column("root_session_id", ID, nullable=False, index=True),
    Column("retry_count", Integer, nullable=False, default=0),
    Column("chain_submitted_at", UTCDateTime, nullable=False),
    Column("retry_after", UTCDateTime, nullable=True),
    Column("phase_tries", Integer, nullable=False, default=0),
    Column("reschedule_count", Integer, nullable=False, default=0),
    # Suspend mode: times it was resumed (its kernels see it as $CORRAL_RESUME_COUNT).
    Column("resume_count", Integer, nullable=False, default=0, server_default="0"),
    Column("attempt", Integer, nullable=False, default=1, server_default="1"),
    Column("manual_retry", Boolean, nullable=False, default=False, server_default=false()),
    # Budget-consuming retries of the whole chain (the global cap), free requeues so far, and
    # each named rule's own count: carried from parent to child.
    Column("total_retries", Integer, nullable=False, default=0, server_default="0"),
    Column("free_requeues", Integer, nullable=False, default=0, server_default="0"),
    Column("rule_counts", JSON, nullable=True),
    Column("first_started_at", UTCDateTime, nullable=True),
    Column("retry_cause", String(32), nullable=True),
    # "attempt N of M" as decided when the attempt was made (NULL: from the inline policy).
    Column("planned_attempts", Integer, nullable=True),
    Column("avoid_agent", String(128), nullable=True),
    # The retry engine's decision on this attempt once it ended (NULL: not decided yet).
    Column("retry_state", String(16), nullable=True),
    Column("retry_reason", Text, nullable=True),
    Column("next_attempt_id", ID, nullable=True),
    # A preemptor's hold on the agents its victims free: {"agents": [...], "victims": [...]}.
    # SQL NULL when none (not JSON null), so the cycle's look-up of holds reads no other row.
    Column("reservation", JSON(none_as_null=True), nullable=True),
    Column("termination_reason", String(32), nullable=True),
    Column("termination_message", Text, nullable=True),
    Column("termination_requested_at", UTCDateTime, nullable=True),
    Column("preempted_by", ID, nullable=True),  # the session whose preemption asked it to stop
    Column("created_at", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime, nullable=True),
    Column("terminated_at", UTCDateTime, nullable=True),
    Index("ix_sessions_rg_status", "resource_group", "status", "termination_reason"),
    # Idempotency is per caller: another user's creation_id is never found, let alone returned.
    UniqueConstraint("owner", "creation_id", name="uq_sessions_owner_creation_id"),
    # Partial: a full index of a column NULL in most rows took an entry from every status change
    # of every session (no change of status is a heap-only update).
    *(
        Index(
            f"ix_sessions_{column}",
            column,
            unique=unique,
            sqlite_where=text(f"{column} IS NOT NULL"),
            postgresql_where=text(f"{column} IS NOT NULL"),
        )
        for column, unique in (("parent_session_id", True), ("array_id", False), ("preempted_by", False))
    ),
    postgresql_with={"fillfactor": FILLFACTOR},
)
# The scheduler reads the head of each status's queue by this index, never sorting the whole queue.
Index(
    "ix_sessions_queue",
    sessions.c.resource_group,
    sessions.c.status,
    sessions.c.priority.desc(),
    sessions.c.chain_submitted_at,
    sessions.c.id,
)
UNDECIDED = (
    "retry_state IS NULL AND status IN"
    " ('SCHEDULED', 'PREPARING', 'PULLING', 'PREPARED', 'CREATING', 'RUNNING', 'TERMINATING', 'ERROR')"
)
"""SQL: placed attempts, and failed ones the retry engine has yet to decide on (migration 0012)."""
# Among them those with a failed kernel keep their place in line for what their ended kernels freed
# until their retry is decided (store/retry_holds.py): the live sessions, and a few more.
Index(
    "ix_sessions_undecided",
    sessions.c.resource_group,
    sqlite_where=text(UNDECIDED),
    postgresql_where=text(UNDECIDED),
)
# Lists, newest first, page by page (keyset: no OFFSET scan): a member's by project, an admin's all.
Index("ix_sessions_listed", sessions.c.created_at.desc(), sessions.c.id)
Index("ix_sessions_project_listed", sessions.c.project, sessions.c.created_at.desc(), sessions.c.id)
# The few sessions holding agents for their victims, found without reading the queue.
Index(
    "ix_sessions_held",
    sessions.c.resource_group,
    sqlite_where=sessions.c.reservation.is_not(None),
    postgresql_where=sessions.c.reservation.is_not(None),
)

KERNEL_ENDED = "status IN (" + ", ".join(f"'{s}'" for s in sorted(TERMINAL_KERNEL)) + ")"
"""SQL: the kernel's status is terminal (its `ended` column)."""
ON_AGENT = "NOT ended OR NOT logs_done"
"""SQL: the condition of the index of kernels by agent (migration 0010)."""

kernels = Table(
    "kernels",
    metadata,
    Column("id", ID, primary_key=True),
    Column("session_id", ID, ForeignKey("sessions.id"), nullable=False),
    Column("rank", Integer, nullable=False),
    Column("role", String(16), nullable=False),
    Column("agent_id", String(128), nullable=True),
    Column("status", String(16), nullable=False),
    Column("status_changed_at", UTCDateTime, nullable=False),
    Column("resources", JSON, nullable=False),
    Column("generation", Integer, nullable=False, default=0),
    Column("master_port", Integer, nullable=True),
    Column("kill_requested", Boolean, nullable=False, default=False),
    Column("kill_forced", Boolean, nullable=False, default=False, server_default=false()),
    Column("kill_grace", Float, nullable=True),
    Column("devices", JSON, nullable=True),  # GPU indexes on its agent (CUDA_VISIBLE_DEVICES)
    # The agent has shipped all of this kernel's output; bytes dropped by the log cap.
    Column("logs_done", Boolean, nullable=False, default=False, server_default=false()),
    Column("log_dropped", BigInteger, nullable=False, default=0, server_default="0"),
    Column("started", Boolean, nullable=False, default=False),
    Column("exit_code", Integer, nullable=True),
    Column("signal", Integer, nullable=True),
    Column("oom_killed", Boolean, nullable=False, default=False),
    Column("killed_by_corral", Boolean, nullable=False, default=False),
    Column("agent_lost", Boolean, nullable=False, default=False),
    Column("image_failed", Boolean, nullable=False, default=False),
    Column("exited_at_ns", BigInteger, nullable=True),
    Column("conditions", JSON, nullable=False, default=list),
    Column("termination_message", Text, nullable=True),
    Column("error_record", JSON, nullable=True),
    Column("detail", JSON, nullable=False, default=dict),
    # Computed by the database from `status`: it changes when the kernel ends and at no other status
    # change, which PostgreSQL may then still write as a heap-only version (an index whose condition
    # named `status` would take an entry at every status change).
    Column("ended", Boolean, Computed(KERNEL_ENDED, persisted=True)),
    # One kernel a rank in a session (a re-placement is a new generation of the same row); it is
    # also the look-up of a session's kernels.
    Index("uq_kernels_session_rank", "session_id", "rank", unique=True),
    # An agent's kernels that have not ended or whose output it still owes: what its order polls,
    # the sweeps and its registration read, never every kernel it ever ran (an index of all of them
    # would make each poll's time grow with the agent's history).  The only index of agent_id: a
    # placement writes one entry a kernel.
    Index("ix_kernels_on_agent", "agent_id", sqlite_where=text(ON_AGENT), postgresql_where=text(ON_AGENT)),
    postgresql_with={"fillfactor": FILLFACTOR},
)
LIVE_KERNEL = text("NOT kernels.ended")
"""The kernel has not ended, written as in the index's condition: only then do the planners (SQLite's
in particular, which would write `ended = 0`) know that index holds every row the statement wants."""
UNSHIPPED = text("NOT kernels.logs_done")
"""The kernel's output is not all shipped, written as in the index's condition."""

allocations = Table(
    "allocations",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("kernel_id", ID, ForeignKey("kernels.id"), nullable=False, index=True),
    Column("session_id", ID, nullable=False, index=True),
    Column("agent_id", String(128), nullable=False),
    Column("slots", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("released_at", UTCDateTime, nullable=True),
    Index("ix_allocations_live", "agent_id", "released_at"),
)

# The outbox: written in the transaction of each status change; retry, SSE and webhooks read it.
session_events = Table(
    "session_events",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    # The writer's transaction id (PostgreSQL: pg_current_xact_id(), migration 0013; SQLite: 0, its
    # writers take turns): readers go in (txid, id) order, over ended writers only (domain/events).
    Column("txid", BigInteger, nullable=False, server_default="0"),
    # What the event is about: a session (session_id is then its id too), a webhook, ...
    Column("entity_kind", String(16), nullable=False, server_default="session"),
    Column("entity_id", String(64), nullable=False),
    # Whose it is: only its project's members read it (None: admins only).
    Column("project", String(128), nullable=True),
    Column("session_id", ID, nullable=True, index=True),
    Column("kind", String(64), nullable=False),
    Column("from_status", String(16), nullable=True),
    Column("to_status", String(16), nullable=True),
    Column("payload", JSON, nullable=False, default=dict),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_session_events_position", "txid", "id"),
)

session_history = Table(
    "session_history",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("session_id", ID, nullable=False, index=True),
    Column("handler", String(64), nullable=False),
    Column("result", String(16), nullable=False),
    Column("from_status", String(16), nullable=False),
    Column("to_status", String(16), nullable=True),
    Column("message", Text, nullable=False),
    Column("count", Integer, nullable=False, default=1),
    Column("created_at", UTCDateTime, nullable=False),
    Column("last_at", UTCDateTime, nullable=False),
)

kernel_logs = Table(
    "kernel_logs",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("session_id", ID, nullable=False),
    Column("kernel_id", ID, nullable=False),
    Column("stream", String(8), nullable=False),
    # The kernel's placement: a resumed kernel's new files start at offset 0 again.
    Column("generation", Integer, nullable=False, default=0, server_default="0"),
    Column("offset", BigInteger, nullable=False),
    # Bytes, as the kernel wrote them (NULs and invalid UTF-8 included).
    Column("data", LargeBinary, nullable=False),
    Column("size", Integer, nullable=False, server_default="0"),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_kernel_logs_session", "session_id", "id"),
    Index("uq_kernel_logs_chunk", "kernel_id", "generation", "stream", "offset", unique=True),
)

# One holder at a time for a named piece of work ("scheduler:GROUP", "webhook:ID"): store/leases.
leases = Table(
    "leases",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("holder", String(64), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)

# Runtime-changeable cluster settings shared by all managers (retry switch, caps, categories).
cluster_config = Table(
    "cluster_config",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", JSON, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

# Named retry policies (Armada's RetryPolicy resource): the validated spec as applied.
retry_policies = Table(
    "retry_policies",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("spec", JSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

# How far a durable consumer of session_events has read (the retry engine is one).
event_cursors = Table(
    "event_cursors",
    metadata,
    Column("consumer", String(64), primary_key=True),
    Column("txid", BigInteger, nullable=False, server_default="0"),  # with position: domain/events
    Column("position", BigInteger, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("actor", String(128), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(255), nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

# Defined beside, on this metadata (this file's length): Alembic sees them with the rest.
from corral.store import deployment_tables, web_tables, webhook_tables  # noqa: E402, F401
