"""Engines for SQLite (embedded default) and PostgreSQL: connection set-up, pools, the SQLite
inline driver and its read-only reader pool."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, cast
from weakref import WeakSet

from sqlalchemy import ARRAY, BindParameter, QueuePool, String, create_engine, event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.sqltypes import TupleType

from corral.metrics import DB_CONNECTIONS_OPENED
from corral.store.dialect import sqlite_inline
from corral.store.dialect.sqlite_inline_engine import InlineEngine

# Engines whose connections run on the loop's thread (see `reading`).
_INLINE: WeakSet[Engine] = WeakSet()


def backend(engine: AsyncEngine) -> str:
    """The backend's name, for the operator's eyes (logs); code asks store.dialect what it can do."""
    return str(engine.dialect.name)


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


# json's C scanner (typeshed does not declare the attribute).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def json_loads(text: str) -> Any:
    """A stored JSON value: what `json.loads` returns, without its Python-level wrapping (two
    regular-expression scans per value; a handler's targets carry a dozen JSON values per session,
    and decoding them was a fifth of reading them)."""
    if not isinstance(text, str):
        return json.loads(text)
    if text == "null":
        return None
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)  # its error, with its message
    return value if end == len(text) else json.loads(text)


def make_engine(url: str, pool_size: int = 16) -> AsyncEngine:
    if not is_sqlite(url):
        # PostgreSQL's own plan caching (a generic plan after five runs, if it costs no more): with
        # `id IN` as `= ANY(array)` (_in_as_any) the generic plan of `id = ANY($1) AND status = $2`
        # looks sessions up by id.  An IN list of n parameters is a text of its own for every n, and
        # its generic plan, priced without the values, may seek by status over a long queue instead.
        engine = create_async_engine(
            url,
            pool_size=pool_size,
            max_overflow=pool_size,
            hide_parameters=True,
            json_deserializer=json_loads,
            # A request waits this long for a connection to an unreachable server, not asyncpg's 60 s.
            connect_args={"timeout": CONNECT_TIMEOUT},
        )
        # A many-row INSERT as one multi-row statement (as SQLAlchemy does for psycopg2), not one
        # execution per row.
        engine.sync_engine.dialect.use_insertmanyvalues_wo_returning = True
        engine.sync_engine.dialect.statement_compiler = _in_as_any(
            engine.sync_engine.dialect.statement_compiler
        )
        _ping_when_idle(engine)
        _prepare_connections(engine)
        return engine
    # One writer connection: SQLite has one writer anyway, and a single connection means no
    # "database is locked" between our own coroutines.  BEGIN IMMEDIATE takes the write lock up
    # front, so another process (e.g. `corral db upgrade`) makes it wait, not fail.
    # Its automatic checkpoint is off: the manager checkpoints on a thread
    # (store/dialect/sqlite_checkpoint.py).
    return _sqlite_engine(url, 1, "BEGIN IMMEDIATE", ("wal_autocheckpoint=0", "journal_size_limit=4194304"))


# How long a pooled connection may sit unused before a checkout pings it.  pool_pre_ping pings at
# every checkout, and asyncpg's ping is three round trips (BEGIN, ";", ROLLBACK), for connections
# used milliseconds before.  Within the window a connection the server has closed (a restart terminates every
# backend) is still caught, by asyncpg's own knowledge and without a round trip; one that dies
# unnoticed fails its transaction once, as a connection dying mid-transaction does, and the pool
# then replaces every connection older than the failure.
PING_AFTER = 1.0


CONNECT_TIMEOUT = 5.0


def _in_as_any(base: type[SQLCompiler]) -> type[SQLCompiler]:
    """PostgreSQL's compiler, with `column IN (list)` as `column = ANY(array)`: one parameter
    whatever the list's length.  asyncpg prepares every statement, once per connection and SQL
    text, and an IN list of n values is a text of its own for every n: a busy cycle prepared a
    statement for one in five it ran (a round trip, and a parse and analysis in the server).  The
    planner sees the same thing either way (it turns an IN list into `= ANY` itself)."""

    class Compiler(base):  # type: ignore[valid-type,misc]
        def visit_in_op_binary(self, binary: Any, operator: Any, **kw: Any) -> str:
            right = binary.right
            if isinstance(right, BindParameter) and right.expanding and not isinstance(right.type, TupleType):
                array = right._clone(maintain_key=True)
                array.expanding = False
                array.type = ARRAY(unbounded(right.type))
                return f"{self.process(binary.left, **kw)} = ANY({self.process(array, **kw)})"
            return str(self._generate_generic_binary(binary, " IN ", **kw))

    return Compiler


def unbounded(item: Any) -> Any:
    """A string type without its length, for an array of values: `$1::VARCHAR(36)[]` cuts a longer
    value to 36 characters (to match what it is not, or be stored cut); `$1::VARCHAR` never did."""
    if isinstance(item, String) and item.length is not None:
        return String()
    return item


def _ping_when_idle(engine: AsyncEngine) -> None:
    """pool_pre_ping, with the round trip only for connections idle longer than PING_AFTER."""
    pool = engine.sync_engine.pool

    @event.listens_for(pool, "connect")
    @event.listens_for(pool, "checkin")
    def _idle_from(dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(pool, "checkout")
    def _ping(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if dbapi_connection.driver_connection.is_closed():
            raise DisconnectionError("a pooled connection was closed by the server")
        if time.monotonic() - record.info.get("idle_since", 0.0) < PING_AFTER:
            return
        try:
            dbapi_connection.ping()
        except Exception as exc:
            # The pool discards this connection and checks out another (a new one if need be).
            raise DisconnectionError("a pooled connection failed its ping") from exc


# The array types the store binds (`= ANY`, _in_as_any).  asyncpg learns a type it has no codec for
# by a catalog query, once per connection: found one statement at a time, that is a query per type
# for each connection the pool opens, each planned afresh by a backend whose catalog caches are
# cold.  Named here, they are learnt in one (text[] needs none: asyncpg has its codec).
_ARRAYS = "SELECT " + ", ".join(
    f"NULL::{t}[]" for t in ("varchar", "boolean", "integer", "bigint", "float8", "timestamptz")
)


def _prepare_connections(engine: AsyncEngine) -> None:
    """The array types learnt up front on each new connection (_ARRAYS).  Counted: churn shows in
    /metrics.  Through the DBAPI cursor, not asyncpg itself: a failure here (the server going away,
    a privilege refused) is then the DBAPI's error, which SQLAlchemy raises from `connect()` as it
    does a refused connection (a 503), not asyncpg's own (a 500)."""

    @event.listens_for(engine.sync_engine.pool, "connect")
    def _set(dbapi_connection: Any, record: Any) -> None:
        DB_CONNECTIONS_OPENED.inc()
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(_ARRAYS)
        finally:
            cursor.close()
        # The cursor began a transaction: ended here, so that the connection enters the pool idle.
        dbapi_connection.commit()


def sqlite_file(engine: AsyncEngine) -> Path | None:
    """The database file of an engine whose connections run on the loop's thread."""
    if engine.sync_engine not in _INLINE or not engine.url.database:
        return None
    return Path(engine.url.database)


def make_reader(engine: AsyncEngine, pool_size: int = 4) -> AsyncEngine:
    """Connections for reads only.  On PostgreSQL: `engine` itself.  On SQLite: a small pool of
    read-only connections beside the one writer.  WAL lets them read while it writes, each from
    the last commit: an agent's long poll or a `GET` need not queue behind a scheduling cycle on
    the writer."""
    if not is_sqlite(str(engine.url)) or engine.url.database in (None, "", ":memory:"):
        return engine  # an in-memory database exists only on its own connection
    return _sqlite_engine(str(engine.url), pool_size, "BEGIN", ("query_only=ON",))


def _sqlite_engine(url: str, pool_size: int, begin: str, pragmas: tuple[str, ...]) -> AsyncEngine:
    """A file's connections run on the loop's thread (store/dialect/sqlite_inline.py and inline_engine.py:
    a statement is neither four thread round trips nor a greenlet's), waiting for locks without
    blocking it; other URLs use aiosqlite.  hide_parameters: a database error's text must never
    carry a session's command or env values."""
    url = _aiosqlite(url)
    parsed = make_url(url)
    options: dict[str, Any] = {
        "pool_size": pool_size,
        "max_overflow": 0,
        "pool_timeout": 60,
        "hide_parameters": True,
        "json_deserializer": json_loads,
    }
    if parsed.database not in (None, "", ":memory:") and not parsed.query:
        sync = create_engine(
            parsed.set(drivername="sqlite+pysqlite"),
            creator=partial(sqlite_inline.connect, parsed.database),
            poolclass=QueuePool,
            **options,
        )
        # Last: the pragmas before may wait (see sqlite_inline.connect); then waits are the engine's.
        _sqlite_session(sync, begin, (*pragmas, "busy_timeout=0"))
        _INLINE.add(sync)
        inline = InlineEngine(sync, parsed, pool_size, writes="IMMEDIATE" in begin)
        return cast(AsyncEngine, inline)  # the interface Corral uses: see inline_engine.py
    engine = create_async_engine(url, **options)
    _sqlite_session(engine.sync_engine, begin, ("busy_timeout=30000", *pragmas))
    return engine


def _aiosqlite(url: str) -> str:
    return "sqlite+aiosqlite:" + url[len("sqlite:") :] if url.startswith("sqlite:") else url


def _sqlite_session(engine: Engine, begin: str, pragmas: tuple[str, ...]) -> None:
    """Every connection in WAL mode, waiting on locks; each transaction opened by `begin`."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        if dbapi_conn.isolation_level is not None:
            dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        common = ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON")
        for pragma in (*common, *pragmas):
            cur.execute(f"PRAGMA {pragma}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(begin)
