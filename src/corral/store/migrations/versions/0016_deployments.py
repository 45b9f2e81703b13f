"""deployments, their revisions, routes and history (DESIGN §7)

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from corral.store.tables import UTCDateTime

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deployment_history",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("deployment_id", sa.String(length=36), nullable=False),
        sa.Column("route_id", sa.String(length=36), nullable=True),
        sa.Column("handler", sa.String(length=64), nullable=False),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=False),
        sa.Column("to_status", sa.String(length=16), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("last_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployment_history")),
    )
    with op.batch_alter_table("deployment_history", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_deployment_history_deployment_id"), ["deployment_id"], unique=False
        )

    op.create_table(
        "deployments",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("project", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("status_changed_at", UTCDateTime(), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("public", sa.Boolean(), nullable=False),
        sa.Column("max_surge", sa.String(length=8), nullable=False),
        sa.Column("max_unavailable", sa.String(length=8), nullable=False),
        sa.Column("drain_timeout", sa.Float(), nullable=False),
        sa.Column("progress_deadline", sa.Float(), nullable=False),
        sa.Column("rollout_started_at", UTCDateTime(), nullable=True),
        sa.Column("rollout_stalled", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("ended_in_a_row", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_replica_at", UTCDateTime(), nullable=True),
        sa.Column("delete_requested_at", UTCDateTime(), nullable=True),
        sa.Column("message", sa.Text(), server_default="", nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployments")),
        sa.UniqueConstraint("name", name=op.f("uq_deployments_name")),
    )
    op.create_table(
        "deployment_revisions",
        sa.Column("deployment_id", sa.String(length=36), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("session", sa.JSON(), nullable=False),
        sa.Column("health", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["deployment_id"],
            ["deployments.id"],
            name=op.f("fk_deployment_revisions_deployment_id_deployments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("deployment_id", "number", name=op.f("pk_deployment_revisions")),
    )
    op.create_table(
        "routes",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("deployment_id", sa.String(length=36), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("status_changed_at", UTCDateTime(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("port", sa.Integer(), nullable=True),
        sa.Column("in_traffic", sa.Boolean(), nullable=False),
        sa.Column("draining_since", UTCDateTime(), nullable=True),
        sa.Column("held_until", UTCDateTime(), nullable=True),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("health_ok", sa.Integer(), server_default="0", nullable=False),
        sa.Column("health_failed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("health_at", UTCDateTime(), nullable=True),
        sa.Column("health_detail", sa.String(length=256), server_default="", nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["deployment_id"],
            ["deployments.id"],
            name=op.f("fk_routes_deployment_id_deployments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_routes")),
        sa.UniqueConstraint("session_id", name=op.f("uq_routes_session_id")),
    )
    with op.batch_alter_table("routes", schema=None) as batch_op:
        batch_op.create_index("ix_routes_deployment", ["deployment_id", "status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("routes", schema=None) as batch_op:
        batch_op.drop_index("ix_routes_deployment")

    op.drop_table("routes")
    op.drop_table("deployment_revisions")
    op.drop_table("deployments")
    with op.batch_alter_table("deployment_history", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_deployment_history_deployment_id"))

    op.drop_table("deployment_history")
