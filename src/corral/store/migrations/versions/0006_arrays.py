"""job arrays: the array a session is an element of, and its index there

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("array_id", sa.String(length=36), nullable=True))
        batch.add_column(sa.Column("array_index", sa.Integer(), nullable=True))
        batch.create_index(batch.f("ix_sessions_array_id"), ["array_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_index(batch.f("ix_sessions_array_id"))
        batch.drop_column("array_index")
        batch.drop_column("array_id")
