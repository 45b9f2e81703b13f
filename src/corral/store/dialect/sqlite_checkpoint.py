"""WAL checkpoints for the SQLite database, on a thread of their own.

SQLite checkpoints on commit once the log passes 1000 pages: the committing connection copies the
log into the database and syncs both files.  The manager's writer runs on the event loop's thread
(store/dialect/sqlite_inline.py), so that copy would stop every request and cycle for as long as it
takes, seconds on a slow disk.  The writer's automatic checkpoint is off instead, and the manager
runs this: a PASSIVE checkpoint (it waits for nobody) on its own connection in a thread, whenever
the log has grown past the same size.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import structlog

log = structlog.get_logger("corral.store")

WAL_LIMIT = 4 << 20
"""Bytes of log before a checkpoint (SQLite's own default: 1000 pages of 4 KiB)."""
EVERY = 0.5
"""Seconds between looks at the log's size."""


def checkpoint_once(database: Path, limit: int = WAL_LIMIT) -> bool:
    """A checkpoint if the log is over `limit` bytes; whether one ran."""
    try:
        if Path(f"{database}-wal").stat().st_size <= limit:
            return False
    except FileNotFoundError:
        return False
    conn = sqlite3.connect(database, timeout=5.0)
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    finally:
        conn.close()
    return True


async def keep_checkpointed(database: Path) -> None:
    """For ever: the log kept near WAL_LIMIT, off the loop's thread."""
    while True:
        await asyncio.sleep(EVERY)
        try:
            await asyncio.to_thread(checkpoint_once, database)
        except (OSError, sqlite3.Error) as exc:
            log.warning("WAL checkpoint failed; trying again", error=str(exc))
