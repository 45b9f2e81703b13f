"""where a session's kernels start: sessions.workdir (None: each kernel's private directory)

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("workdir", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("sessions", "workdir")
