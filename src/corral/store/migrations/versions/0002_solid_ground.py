"""idempotency per owner; spec hash

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from corral.store.dialect import on_postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_constraint("uq_sessions_creation_id", type_="unique")
        batch.alter_column("creation_id", existing_type=sa.String(length=255), nullable=True)
        batch.add_column(sa.Column("spec_hash", sa.String(length=64), nullable=True))
        batch.create_unique_constraint("uq_sessions_owner_creation_id", ["owner", "creation_id"])
    with op.batch_alter_table("kernels") as batch:
        batch.add_column(sa.Column("kill_forced", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("logs_done", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("log_dropped", sa.BigInteger(), nullable=False, server_default="0"))
    # Logs become bytes (a kernel may print NULs or invalid UTF-8), with their size for paging.
    if on_postgresql(op.get_bind()):
        op.execute("ALTER TABLE kernel_logs ALTER COLUMN data TYPE BYTEA USING convert_to(data, 'UTF8')")
    else:
        with op.batch_alter_table("kernel_logs") as batch:
            batch.alter_column("data", existing_type=sa.Text(), type_=sa.LargeBinary())
    with op.batch_alter_table("kernel_logs") as batch:
        batch.add_column(sa.Column("size", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE kernel_logs SET size = length(data)")
    # Sessions created without a creation_id used their own id: that made any session id a key
    # another user could replay.  They simply have none now.
    op.execute("UPDATE sessions SET creation_id = NULL WHERE creation_id = id")


def downgrade() -> None:
    with op.batch_alter_table("kernel_logs") as batch:
        batch.drop_column("size")
    if on_postgresql(op.get_bind()):
        op.execute("ALTER TABLE kernel_logs ALTER COLUMN data TYPE TEXT USING convert_from(data, 'UTF8')")
    else:
        with op.batch_alter_table("kernel_logs") as batch:
            batch.alter_column("data", existing_type=sa.LargeBinary(), type_=sa.Text())
    with op.batch_alter_table("kernels") as batch:
        batch.drop_column("log_dropped")
        batch.drop_column("logs_done")
        batch.drop_column("kill_forced")
    op.execute("UPDATE sessions SET creation_id = id WHERE creation_id IS NULL")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_constraint("uq_sessions_owner_creation_id", type_="unique")
        batch.drop_column("spec_hash")
        batch.alter_column("creation_id", existing_type=sa.String(length=255), nullable=False)
        batch.create_unique_constraint("uq_sessions_creation_id", ["creation_id"])
