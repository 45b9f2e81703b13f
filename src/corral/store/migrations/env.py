"""Alembic environment: runs on the connection Corral hands it (see store/db.py)."""

from __future__ import annotations

from alembic import context

from corral.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `corral db upgrade`")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
