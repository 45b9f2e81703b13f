"""retry engine: attempt chain columns, one child per session, cluster config, policies, cursors, audit

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from corral.store.tables import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _session_columns() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("attempt", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("manual_retry", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("total_retries", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("free_requeues", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("rule_counts", sa.JSON(), nullable=True),
        sa.Column("first_started_at", UTCDateTime(), nullable=True),
        sa.Column("retry_cause", sa.String(length=32), nullable=True),
        sa.Column("planned_attempts", sa.Integer(), nullable=True),
        sa.Column("avoid_agent", sa.String(length=128), nullable=True),
        sa.Column("retry_state", sa.String(length=16), nullable=True),
        sa.Column("retry_reason", sa.Text(), nullable=True),
        sa.Column("next_attempt_id", sa.String(length=36), nullable=True),
    )


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        for column in _session_columns():
            batch.add_column(column)
        batch.drop_index("ix_sessions_parent_session_id")
        batch.create_index("ix_sessions_parent_session_id", ["parent_session_id"], unique=True)
    # Sessions that ended before the engine existed are not retried when it first starts.
    op.execute(
        "UPDATE sessions SET retry_state = 'none', retry_reason = 'ended before the retry engine'"
        " WHERE status IN ('TERMINATED', 'ERROR', 'CANCELLED')"
    )
    op.create_table(
        "cluster_config",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_cluster_config")),
    )
    op.create_table(
        "retry_policies",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_retry_policies")),
    )
    op.create_table(
        "event_cursors",
        sa.Column("consumer", sa.String(length=64), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("consumer", name=op.f("pk_event_cursors")),
    )
    op.create_table(
        "audit_log",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )


def downgrade() -> None:
    op.drop_table("audit_log")
    op.drop_table("event_cursors")
    op.drop_table("retry_policies")
    op.drop_table("cluster_config")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_index("ix_sessions_parent_session_id")
        batch.create_index("ix_sessions_parent_session_id", ["parent_session_id"], unique=False)
        for column in reversed(_session_columns()):
            batch.drop_column(column.name)
