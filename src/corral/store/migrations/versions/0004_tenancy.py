"""tenancy and preemption: a user's own settings (priority rules), a preemptor's reservation, a
kill's grace period, a kernel's GPU device indexes

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("config", sa.JSON(), nullable=True))
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("reservation", sa.JSON(), nullable=True))
    with op.batch_alter_table("kernels") as batch:
        batch.add_column(sa.Column("kill_grace", sa.Float(), nullable=True))
        batch.add_column(sa.Column("devices", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kernels") as batch:
        batch.drop_column("devices")
        batch.drop_column("kill_grace")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("reservation")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("config")
