"""the web UI's sign-ins and cookie signing key; session lists by creation time (keyset pages);
the preemptor of each preempted session

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from corral.store.tables import UTCDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("csrf", sa.String(length=64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_web_sessions")),
    )
    with op.batch_alter_table("web_sessions", schema=None) as batch_op:
        batch_op.create_index("ix_web_sessions_key", ["key_hash"], unique=False)
    op.create_table(
        "web_keys",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_web_keys")),
    )
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("preempted_by", sa.String(length=36), nullable=True))
    held = sa.text("preempted_by IS NOT NULL")
    op.create_index(
        "ix_sessions_preempted_by", "sessions", ["preempted_by"], sqlite_where=held, postgresql_where=held
    )
    op.create_index("ix_sessions_listed", "sessions", [sa.text("created_at DESC"), "id"])
    op.create_index("ix_sessions_project_listed", "sessions", ["project", sa.text("created_at DESC"), "id"])


def downgrade() -> None:
    op.drop_index("ix_sessions_project_listed", table_name="sessions")
    op.drop_index("ix_sessions_listed", table_name="sessions")
    op.drop_index("ix_sessions_preempted_by", table_name="sessions")
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("preempted_by")
    op.drop_table("web_keys")
    op.drop_table("web_sessions")
