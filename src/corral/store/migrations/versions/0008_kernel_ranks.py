"""one kernel a rank in a session: the unique (session_id, rank) index replaces the session_id one

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("uq_kernels_session_rank", "kernels", ["session_id", "rank"], unique=True)
    op.drop_index("ix_kernels_session_id", table_name="kernels")


def downgrade() -> None:
    op.create_index("ix_kernels_session_id", "kernels", ["session_id"])
    op.drop_index("uq_kernels_session_rank", table_name="kernels")
