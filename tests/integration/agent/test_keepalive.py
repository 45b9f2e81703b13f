"""An idle connection is the client's to close: the manager keeps it open longer than HTTP clients
keep theirs for reuse (httpx: 5 s), so that a request sent as the server closed never fails with
"Server disconnected without sending a response" (seen in CI with equal timeouts)."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

from tests.support.cluster import Cluster

CLIENT_KEEPALIVE = 5.0
"""httpx's default keep-alive expiry: the agents', the CLI's and the tests' clients."""


def _exchange(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: corral\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:])
    length = int(next(value for name, value in fields.items() if name.lower() == b"content-length"))
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_a_connection_idle_as_long_as_a_client_keeps_one_is_still_served(cluster: Cluster) -> None:
    where = urlsplit(cluster.url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        assert _exchange(sock).startswith(b"HTTP/1.1 200")
        time.sleep(CLIENT_KEEPALIVE + 0.5)  # idle: what is measured, not a wait for something
        assert _exchange(sock).startswith(b"HTTP/1.1 200")
