"""kernels: `ended` (computed from the status); the kernels by agent indexed only while not ended
or their output is not all shipped

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from corral.store.dialect import on_postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

ENDED = "status IN ('CANCELLED', 'ERROR', 'TERMINATED')"
"""The kernel's status is terminal; must match `store/tables.py`."""
ON_AGENT = sa.text("NOT ended OR NOT logs_done")
"""Must match `store/tables.py`."""


# A later migration that rebuilds kernels on SQLite (batch_alter_table copies every column) must drop
# the index and `ended` first and add them back after: SQLite refuses a copy into a computed column.


def upgrade() -> None:
    # PostgreSQL keeps a computed column's value in the row (and rewrites the table to add it);
    # SQLite can only add one computed when read, which its index then holds.
    stored = on_postgresql(op.get_bind())
    op.add_column("kernels", sa.Column("ended", sa.Boolean(), sa.Computed(ENDED, persisted=stored or None)))
    op.create_index(
        "ix_kernels_on_agent", "kernels", ["agent_id"], sqlite_where=ON_AGENT, postgresql_where=ON_AGENT
    )
    op.drop_index("ix_kernels_agent_id", table_name="kernels")


def downgrade() -> None:
    op.create_index("ix_kernels_agent_id", "kernels", ["agent_id"])
    op.drop_index("ix_kernels_on_agent", table_name="kernels")
    op.execute("ALTER TABLE kernels DROP COLUMN ended")
