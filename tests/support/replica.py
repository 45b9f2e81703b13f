"""A deployment replica for tests: an HTTP server on $CORRAL_PORT.

`GET /health` answers 200, or 500 while $REPLICA_SICK/<its session id> exists; `GET /pid` its
session id and process id; every other GET
answers the replica's session id (which replica served it); POST echoes its body.  With
$REPLICA_SLOW, each answer waits that many seconds (requests in flight during a drain)."""

from __future__ import annotations

import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SESSION = os.environ.get("CORRAL_SESSION_ID", "?")
SICK = os.environ.get("REPLICA_SICK")
SLOW = float(os.environ.get("REPLICA_SLOW", "0"))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer(500 if SICK and Path(SICK, SESSION).exists() else 200, b"ok")
            return
        if self.path == "/pid":
            self._answer(200, f"{SESSION} {os.getpid()}".encode())
            return
        time.sleep(SLOW)
        shown = ("x-forwarded", "authorization", "cookie")
        seen = ",".join(f"{k}={v}" for k, v in self.headers.items() if k.lower().startswith(shown))
        self._answer(200, f"{SESSION} {self.path} {seen}".encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        time.sleep(SLOW)
        self._answer(200, body)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", int(os.environ["CORRAL_PORT"])), Handler).serve_forever()
