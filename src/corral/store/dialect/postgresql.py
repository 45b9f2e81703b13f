"""PostgreSQL's own: reads outside a transaction (READ COMMITTED), a seek per status, wake-ups
shared between managers (LISTEN/NOTIFY) and an advisory lock around migrations.  Everything else
is the portable statement (portable.py)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, func, literal_column
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.store.db import MIGRATION_LOCK
from corral.store.dialect import S
from corral.store.dialect.portable import Portable
from corral.store.dialect.postgresql_notify import Notifier
from corral.store.unit import Engine
from corral.wakeup import Wakeup


class PostgreSQL(Portable):
    name = "postgresql"
    reads_outside_transactions = True
    seeks_each_status = True

    def upkeep(self, engine: Engine, wakeup: Wakeup) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """Wake-ups shared with the other managers on the database (LISTEN/NOTIFY): a session one
        manager admits wakes the loop another holds."""
        notifier = Notifier(engine.url, wakeup)
        wakeup.broadcast = notifier.send
        return [("wake-ups", notifier.run())]

    async def lock_migrations(self, conn: AsyncConnection) -> None:
        """An advisory lock, taken before Alembic reads the version: managers that both read none
        would both create the tables, and one fail."""
        await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")

    def committed(self, query: S, txid: ColumnElement[int]) -> S:
        """Rows of transactions below the snapshot's xmin: each of those has committed or rolled
        back, and every transaction still to write gets a higher id.  The snapshot is the
        statement's own (READ COMMITTED), the one its rows are read in."""
        return query.where(txid < _XMIN)

    def clock(self) -> ColumnElement[Any]:
        """The time now, not the transaction's start (now()): a lease is judged when it is checked."""
        return func.clock_timestamp()


# The oldest transaction id still running, as a bigint (xid8 prints as its decimal number).
_XMIN = literal_column("pg_snapshot_xmin(pg_current_snapshot())::text::bigint", BigInteger)
