"""Keep-alive HTTP/1.1 connections, by address, spoken with h11 (httpx's own protocol library):
the proxy's to replicas, and webhooks' to their receivers (over TLS for https).

httpx's pool checks every pooled connection on every request (a readability poll each: at 32
requests at once, 37% of the manager's CPU went there, bench/serve.py); here a request takes the
most recently idle connection of its address, or opens one.  A connection goes back idle only
after a whole exchange ended cleanly; anything else closes it."""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import h11

CONNECT_TIMEOUT = 5.0
IDLE_KEPT = 64
"""Idle connections kept per replica address (more are closed)."""
READ = 65536


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


class Refused(Exception):
    """The replica could not be reached: no byte of the request was sent."""


class Broken(Exception):
    """The exchange failed after the request (or part of it) was sent."""


@dataclass(eq=False)
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    h11: h11.Connection = field(default_factory=lambda: h11.Connection(h11.CLIENT))

    def close(self) -> None:
        self.writer.close()


@dataclass(eq=False)
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]
    _conn: _Conn
    _pool: Upstream
    _address: str
    _done: bool = False

    async def body(self) -> AsyncIterator[bytes]:
        """The body as it arrives (de-chunked: the caller's side frames it again)."""
        try:
            while True:
                event = await self._pool._next(self._conn)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    self._done = True
                    return
                elif isinstance(event, h11.ConnectionClosed):
                    raise Broken("the replica closed the connection mid-answer")
        finally:
            self.release()

    def release(self) -> None:
        """Idempotent: back to the pool after a clean exchange, else closed."""
        conn, self._conn = self._conn, None  # type: ignore[assignment]
        if conn is not None:
            self._pool._give_back(self._address, conn, self._done)


class Upstream:
    """`aclose()` when the manager stops (idempotent)."""

    def __init__(self) -> None:
        self._idle: defaultdict[str, deque[_Conn]] = defaultdict(deque)

    async def _open(self, address: str, connect_to: tuple[str, int] | None, tls: str | None) -> _Conn:
        if connect_to is None:
            name, _, number = address.rpartition(":")
            connect_to = (name, int(number) if number.isdigit() else 0)
        host, port = connect_to
        try:
            if tls:
                opened = asyncio.open_connection(host, port, ssl=_tls_context(), server_hostname=tls)
            else:
                opened = asyncio.open_connection(host, port)
            reader, writer = await asyncio.wait_for(opened, CONNECT_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as exc:
            raise Refused(f"{type(exc).__name__}: {exc}") from None
        return _Conn(reader, writer)

    async def _next(self, conn: _Conn) -> h11.Event:
        while True:
            try:
                event = conn.h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise Broken(f"the replica's answer is not HTTP/1.1: {exc}") from None
            if event is h11.PAUSED:
                raise Broken("the replica sent more than one answer")
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            try:
                data = await conn.reader.read(READ)
            except OSError as exc:
                raise Broken(str(exc)) from None
            conn.h11.receive_data(data)

    def _give_back(self, address: str, conn: _Conn, clean: bool) -> None:
        if clean and conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE:
            conn.h11.start_next_cycle()
            idle = self._idle[address]
            if len(idle) < IDLE_KEPT:
                idle.append(conn)
                return
        conn.close()

    async def send(
        self,
        address: str,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: AsyncIterator[bytes] | None,
        connect_to: tuple[str, int] | None = None,
        tls: str | None = None,
    ) -> Response:
        """Send the request (streaming `body`) and read the answer's head.  `address` names the
        pool (`host:port`, connected to unless `connect_to` says where: an address resolved and
        checked already); `tls` the server name to verify over TLS.  Refused: nothing was sent (a
        fresh connection could not be made).  Broken: it failed later.  A kept connection the
        other side had closed meanwhile is replaced once, when no byte of a body was sent yet."""
        idle = self._idle[address]
        for reused in (True, False) if idle else (False,):
            conn = idle.pop() if reused and idle else await self._open(address, connect_to, tls)
            sent_body = False
            try:
                conn.writer.write(
                    conn.h11.send(h11.Request(method=method, target=target, headers=list(headers)))
                )
                if body is not None:
                    async for chunk in body:
                        if not chunk:
                            continue
                        sent_body = True
                        conn.writer.write(conn.h11.send(h11.Data(data=chunk)))
                        await conn.writer.drain()
                conn.writer.write(conn.h11.send(h11.EndOfMessage()))
                await conn.writer.drain()
                event = await self._next(conn)
                while isinstance(event, h11.InformationalResponse):
                    event = await self._next(conn)
                if not isinstance(event, h11.Response):
                    raise Broken("the replica closed the connection before answering")
            except (Broken, OSError, h11.LocalProtocolError) as exc:
                conn.close()
                if reused and not sent_body:
                    continue  # a kept connection gone stale: once more on a fresh one
                raise Broken(str(exc)) from None
            except BaseException:
                conn.close()
                raise
            return Response(event.status_code, list(event.headers), conn, self, address)
        raise Broken("no connection")  # not reached: the last try returns or raises

    async def aclose(self) -> None:
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
