"""the queue read by index: sessions in queue order per group and status; the live statuses probed
by index (termination requests included); holds found by a partial index; no hold is JSON null

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from corral.store.dialect import on_postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Released holds were stored as JSON 'null': the look-up of holds decoded every pending row.
    cast = "reservation::text" if on_postgresql(op.get_bind()) else "reservation"
    op.execute(f"UPDATE sessions SET reservation = NULL WHERE {cast} = 'null'")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_index("ix_sessions_rg_status")
        batch.create_index("ix_sessions_rg_status", ["resource_group", "status", "termination_reason"])
    op.create_index(
        "ix_sessions_queue",
        "sessions",
        ["resource_group", "status", sa.text("priority DESC"), "chain_submitted_at", "id"],
    )
    held = sa.text("reservation IS NOT NULL")
    op.create_index(
        "ix_sessions_held", "sessions", ["resource_group"], sqlite_where=held, postgresql_where=held
    )


def downgrade() -> None:
    op.drop_index("ix_sessions_held", table_name="sessions")
    op.drop_index("ix_sessions_queue", table_name="sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_index("ix_sessions_rg_status")
        batch.create_index("ix_sessions_rg_status", ["resource_group", "status"])
