"""suspend mode: how many times a session was resumed after a suspension; which placement of its
kernel a log chunk came from (a resumed kernel's output starts at offset 0 again)

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("resume_count", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("kernel_logs") as batch:
        batch.add_column(sa.Column("generation", sa.Integer(), nullable=False, server_default="0"))
    op.drop_index("uq_kernel_logs_chunk", table_name="kernel_logs")
    op.create_index(
        "uq_kernel_logs_chunk", "kernel_logs", ["kernel_id", "generation", "stream", "offset"], unique=True
    )


def downgrade() -> None:
    op.drop_index("uq_kernel_logs_chunk", table_name="kernel_logs")
    op.create_index("uq_kernel_logs_chunk", "kernel_logs", ["kernel_id", "stream", "offset"], unique=True)
    with op.batch_alter_table("kernel_logs") as batch:
        batch.drop_column("generation")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("resume_count")
