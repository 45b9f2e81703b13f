"""A TCP proxy the test controls: forwards, or black-holes (holds connections, passes nothing)."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

from tests.support.postgres import free_port


class Proxy:
    """127.0.0.1:port -> upstream; `blackhole()` is a partition, `heal()` ends it."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._held = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def blackhole(self) -> None:
        self._held.set()

    def heal(self) -> None:
        self._held.clear()
        with self._lock:  # connections that saw the partition are dropped, as a real network would
            for s in self._socks:
                with contextlib.suppress(OSError):
                    s.close()
            self._socks.clear()

    def close(self) -> None:
        self._stop.set()
        self.heal()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(0.1):
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    if not self._held.is_set():  # black-holed: read and drop, answer nothing
                        key.data.sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()
