"""`AsyncClient`: the API from asyncio, the same resources and results as `Client`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from corral.client import sse
from corral.client.endpoint import Async, Call, Stream, one
from corral.client.errors import Unreachable
from corral.client.resources import Resources
from corral.client.transport import API, TIMEOUT, Target, answer, async_pool, refusal, request
from corral.client.waiting import Backoff

if TYPE_CHECKING:
    from corral.client import models as m

T = TypeVar("T")


class AsyncClient(Resources[Async]):
    """`Client` for asyncio: every call is awaited; bound a wait with `asyncio.timeout`.

    async with AsyncClient() as corral:
        s = await corral.sessions.submit(command=["true"])
        done = await corral.wait(s.id)
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = TIMEOUT,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.target = Target.of(url, api_key)
        self._http = http or async_pool(self.target.url, timeout)
        self._owned = http is None
        super().__init__(self)

    @property
    def url(self) -> str:
        return self.target.url

    async def run(self, call: Call[Any]) -> Any:
        try:
            resp = await self._http.send(request(self._http, self.target, call))
        except httpx.HTTPError as exc:
            raise Unreachable(self.target.url, str(exc) or type(exc).__name__) from None
        return answer(call, resp)

    async def me(self) -> m.Me:
        return await self.users.me()

    async def wait(self, session_id: str) -> m.Session:
        """As `Client.wait`."""
        backoff = Backoff()
        while True:
            s = await self.sessions.get(session_id)
            if s.ended:
                return s
            await asyncio.sleep(backoff.next())

    async def wait_chain(self, session_id: str) -> m.Session:
        """As `Client.wait_chain`."""
        backoff = Backoff()
        current = session_id
        while True:
            s = await self.sessions.get(current)
            if s.next_attempt_id:
                current, backoff = s.next_attempt_id, Backoff()
                continue
            if s.ended and s.retry_state != "scheduled" and s.retry_reason is not None:
                return s
            await asyncio.sleep(backoff.next())

    async def wait_array(self, array_id: str) -> m.Array:
        """As `Client.wait_array`."""
        backoff = Backoff()
        while True:
            a = await self.arrays.get(array_id)
            if a.settled:
                return a
            await asyncio.sleep(backoff.next())

    async def follow(self, session_id: str, after: int = 0) -> AsyncIterator[m.LogChunk]:
        """As `Client.follow`."""
        backoff = Backoff()
        while True:
            page = await self.sessions.logs(session_id, after=after)
            for chunk in page.chunks:
                yield chunk
            after = page.next
            if page.complete:
                return
            if page.chunks:
                backoff = Backoff()
            else:
                await asyncio.sleep(backoff.next())

    def stream_events(
        self,
        after: str | None = None,
        *,
        type: list[str] | None = None,
        session: str | None = None,
        array: str | None = None,
        project: str | None = None,
    ) -> AsyncIterator[m.Event]:
        """As `Client.stream_events`."""
        from corral.client import models

        params = sse.event_params(type, session, array, project)
        return self.stream(Stream("/events/stream", one(models.Event), params, after))

    async def stream(self, call: Stream[T]) -> AsyncIterator[T]:
        """As `Client.stream`."""
        last, retry = call.after, sse.Retry()
        while True:
            parser = sse.Parser(last_id=last)
            try:
                async with self._http.stream(
                    "GET",
                    self.target.url + API + call.path,
                    params=call.params,
                    headers=sse.resumed({"Authorization": f"Bearer {self.target.key}"}, last),
                    timeout=httpx.Timeout(self._http.timeout.connect, read=sse.STREAM_READ_TIMEOUT),
                ) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        raise refusal(resp)
                    async for line in resp.aiter_lines():
                        message = parser.feed(line)
                        if message is None:
                            continue
                        if message.event == "resync":
                            parser.last_id = str(message.json()["after"])
                            break
                        retry = sse.Retry()
                        if message.event == call.end:
                            return
                        yield call.read(message.json())
            except httpx.HTTPError:
                await asyncio.sleep(retry.next())
            finally:
                last = parser.last_id

    async def aclose(self) -> None:
        if self._owned:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.aclose()
