"""events in commit order, naming their entity: session_events.txid, entity_kind, entity_id, project

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from corral.store.dialect import on_postgresql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# A writer's transaction id as a bigint (xid8 prints as its decimal number).
PG_TXID = sa.text("(pg_current_xact_id()::text::bigint)")


def upgrade() -> None:
    with op.batch_alter_table("session_events", schema=None) as batch_op:
        # Rows written before have txid 0: they come before every later one, in id order.
        batch_op.add_column(sa.Column("txid", sa.BigInteger(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("entity_kind", sa.String(16), server_default="session", nullable=False))
        batch_op.add_column(sa.Column("entity_id", sa.String(64), server_default="", nullable=False))
        batch_op.add_column(sa.Column("project", sa.String(128), nullable=True))
        batch_op.alter_column("session_id", existing_type=sa.String(36), nullable=True)
    op.execute(
        "UPDATE session_events SET entity_id = session_id,"
        " project = (SELECT project FROM sessions WHERE sessions.id = session_events.session_id)"
    )
    with op.batch_alter_table("session_events", schema=None) as batch_op:
        batch_op.alter_column("entity_id", existing_type=sa.String(64), server_default=None)
        batch_op.create_index("ix_session_events_position", ["txid", "id"], unique=False)
    with op.batch_alter_table("event_cursors", schema=None) as batch_op:
        batch_op.add_column(sa.Column("txid", sa.BigInteger(), server_default="0", nullable=False))
    if on_postgresql(op.get_bind()):
        op.alter_column("session_events", "txid", server_default=PG_TXID)


def downgrade() -> None:
    with op.batch_alter_table("event_cursors", schema=None) as batch_op:
        batch_op.drop_column("txid")
    with op.batch_alter_table("session_events", schema=None) as batch_op:
        batch_op.drop_index("ix_session_events_position")
        batch_op.drop_column("project")
        batch_op.drop_column("entity_id")
        batch_op.drop_column("entity_kind")
        batch_op.drop_column("txid")
