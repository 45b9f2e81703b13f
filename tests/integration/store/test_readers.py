"""On SQLite, reads never queue behind the one writer: `GET`s answer while another process holds
the database's write lock (WAL readers read the last commit)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.cluster import Cluster


@contextmanager
def write_locked(database_url: str) -> Iterator[None]:
    """Another process's write transaction, held open (as a long `corral db upgrade` would)."""
    holder = sqlite3.connect(database_url.split("///", 1)[1], isolation_level=None, timeout=30)
    try:
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("UPDATE cluster_config SET value = value")
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_reads_answer_while_the_database_is_write_locked(
    fresh_database: Callable[[str], str], tmp_path: Path
) -> None:
    url = fresh_database("sqlite")
    c = Cluster(url, tmp_path)
    try:
        c.start_manager()
        c.start_agent("agent-a", cpu=2)
        done = c.wait(c.submit(command=["true"])["id"])
        busy = c.submit(command=["sleep", "600"], resources={"cpu": 2})["id"]
        c.wait(busy, {"RUNNING"})
        waiting = c.submit(command=["true"], resources={"cpu": 2})["id"]  # no room: stays PENDING
        quick = httpx.Client(base_url=c.url, headers={"Authorization": f"Bearer {c.key}"}, timeout=5)
        with quick, write_locked(url):
            # Each would wait out the 30 s busy timeout if reads took the write lock.
            assert quick.get(f"/api/v1/sessions/{waiting}").json()["status"] == "PENDING"
            assert quick.get(f"/api/v1/sessions/{done['id']}").json()["result"] == "success"
            listed = quick.get("/api/v1/sessions", params={"limit": 10}).json()
            assert {s["id"] for s in listed} >= {waiting, done["id"]}
            assert quick.get("/api/v1/sessions/counts").json()["PENDING"] == 1
        # And the writer still works once the lock is gone.
        for sid in (waiting, busy):
            c.http.post(f"/api/v1/sessions/{sid}/cancel").raise_for_status()
            assert c.wait(sid)["cause"] == "user_cancelled"
    finally:
        c.close()
