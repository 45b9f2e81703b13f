"""A webhook receiver on a local port, in a thread: records every request it gets and answers as
its script says (a status per delivery, and how long to take)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    at: float
    """time.monotonic() at arrival"""

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]


class Receiver:
    """`answer(received, nth)` gives the status for a request (nth: how many before it carried the
    same webhook-id); default 200."""

    def __init__(self, answer: Callable[[Received, int], int] | None = None, delay: float = 0.0) -> None:
        self.received: list[Received] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._answer = answer or (lambda r, n: 200)
        self._delay = delay
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                got = Received({k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length), 0.0)
                got = Received(got.headers, got.body, time.monotonic())
                with outer._lock:
                    nth = sum(1 for r in outer.received if r.webhook_id == got.webhook_id)
                    outer.received.append(got)
                    outer.in_flight += 1
                    outer.most_in_flight = max(outer.most_in_flight, outer.in_flight)
                try:
                    if outer._delay:
                        time.sleep(outer._delay)
                    status = outer._answer(got, nth)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1
                reply = b'{"ok": true}'
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.json() for r in self.received]

    def of(self, webhook_id: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.webhook_id == webhook_id]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
