"""placed and failed attempts not yet decided on, by group: ix_sessions_undecided (a retry's place)

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

UNDECIDED = sa.text(
    "retry_state IS NULL AND status IN"
    " ('SCHEDULED', 'PREPARING', 'PULLING', 'PREPARED', 'CREATING', 'RUNNING', 'TERMINATING', 'ERROR')"
)


def upgrade() -> None:
    op.create_index(
        "ix_sessions_undecided",
        "sessions",
        ["resource_group"],
        sqlite_where=UNDECIDED,
        postgresql_where=UNDECIDED,
    )


def downgrade() -> None:
    op.drop_index("ix_sessions_undecided", table_name="sessions")
