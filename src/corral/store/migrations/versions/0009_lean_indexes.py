"""a retry's parent and an array's id are indexed only where set; on PostgreSQL, sessions and
kernels leave room on each page for their rows' next versions

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from corral.store.dialect import on_postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

FILLFACTOR = 70
"""Percent of a page filled by inserts; must match `store/tables.py`."""

INDEXES = (
    ("ix_sessions_parent_session_id", "parent_session_id", True),
    ("ix_sessions_array_id", "array_id", False),
)


def upgrade() -> None:
    # Full indexes of columns NULL in most rows: every status change of every session added an
    # entry to each (a status change is never a heap-only update: status is indexed).  The caller's
    # creation_id would gain the same, but its unique constraint is part of SQLite's table, which
    # cannot be rebuilt here while kernels refer to it.
    for name, column, unique in INDEXES:
        op.drop_index(name, table_name="sessions")
        cond = sa.text(f"{column} IS NOT NULL")
        op.create_index(name, "sessions", [column], unique=unique, sqlite_where=cond, postgresql_where=cond)
    if on_postgresql(op.get_bind()):
        # Kernels change status six times or so, never an indexed column after placement: with room
        # on the page each new version is heap-only, no index touched.  New pages only; old ones
        # as they are rewritten.
        for table in ("sessions", "kernels"):
            op.execute(f"ALTER TABLE {table} SET (fillfactor = {FILLFACTOR})")


def downgrade() -> None:
    if on_postgresql(op.get_bind()):
        for table in ("sessions", "kernels"):
            op.execute(f"ALTER TABLE {table} RESET (fillfactor)")
    for name, column, unique in INDEXES:
        op.drop_index(name, table_name="sessions")
        op.create_index(name, "sessions", [column], unique=unique)
