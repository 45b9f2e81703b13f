"""A real SSE subscriber for tests: reads a stream in a thread, its messages kept for polling."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import httpx

from corral.client.sse import Message, Parser


class Subscriber:
    """`GET path` as a stream, read line by line by a thread until `close()` or the stream ends."""

    def __init__(
        self,
        url: str,
        key: str,
        path: str = "/api/v1/events/stream",
        params: Any = None,
        last_id: str | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        if last_id is not None:
            headers["Last-Event-ID"] = last_id
        self._http = httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(10, read=60))
        self.parser = Parser()
        self.messages: list[Message] = []
        self.status: int | None = None
        self.ended = threading.Event()
        self._socket: socket.socket | None = None
        self._thread = threading.Thread(target=self._read, args=(path, params), daemon=True)
        self._thread.start()

    def _read(self, path: str, params: Any) -> None:
        try:
            with self._http.stream("GET", path, params=params) as resp:
                self.status = resp.status_code
                self._socket = resp.extensions["network_stream"].get_extra_info("socket")
                for line in resp.iter_lines():
                    found = self.parser.feed(line)
                    if found is not None:
                        self.messages.append(found)
        except (httpx.HTTPError, RuntimeError):
            pass  # closed by the test, or the server went away
        finally:
            self.ended.set()

    @property
    def events(self) -> list[dict[str, Any]]:
        return [m.json() for m in self.messages if m.event != "resync"]

    def opened(self) -> bool:
        """The stream has named where it starts (its first `id:`)."""
        return self.parser.last_id is not None

    def close(self) -> None:
        """Hang up as a client going away does (closing the pool from here would not end a read
        blocked in another thread)."""
        if self._socket is not None and not self.ended.is_set():
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)
        self._thread.join(10)
        self._http.close()
