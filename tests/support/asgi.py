"""A real ASGI app served in-process to a blocking httpx client (httpx's ASGITransport is async
only): the app, with its lifespan, runs on an event loop of its own thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx


class SyncASGI(httpx.BaseTransport):
    def __init__(self, app: Any) -> None:
        self.app = app
        self.inner = httpx.ASGITransport(app=app)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="asgi", daemon=True)
        self.thread.start()
        self.stop = asyncio.Event()
        started: asyncio.Future[None] = asyncio.run_coroutine_threadsafe(self._lifespan_started(), self.loop)
        started.result(timeout=60)

    async def _lifespan_started(self) -> None:
        ready = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(self._lifespan(ready))
        await ready

    async def _lifespan(self, ready: asyncio.Future[None]) -> None:
        async with self.app.router.lifespan_context(self.app):
            ready.set_result(None)
            await self.stop.wait()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def go() -> httpx.Response:
            req = httpx.Request(request.method, request.url, headers=request.headers, content=request.read())
            resp = await self.inner.handle_async_request(req)
            return httpx.Response(resp.status_code, headers=resp.headers, content=await resp.aread())

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(timeout=60)

    def close(self) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.stop.set)
            asyncio.run_coroutine_threadsafe(
                asyncio.wait_for(asyncio.shield(self.task), 30), self.loop
            ).result()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)
