"""Steady load through the proxy for tests: `rate` requests a second from a thread, each outcome
kept (status, or the exception's name), until stopped."""

from __future__ import annotations

import threading
import time
from collections import Counter

import httpx


class Load:
    def __init__(self, url: str, key: str, path: str, rate: float = 50.0) -> None:
        self.path = path
        self._http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10)
        self._gap = 1.0 / rate
        self._stop = threading.Event()
        self.outcomes: Counter[str] = Counter()
        self.failures: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self._http.close()

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            try:
                resp = self._http.get(self.path)
                seen = str(resp.status_code)
                if resp.status_code != 200:
                    self.failures.append(f"{resp.status_code} {resp.text[:200]}")
            except httpx.HTTPError as exc:
                seen = type(exc).__name__
                self.failures.append(seen)
            self.outcomes[seen] += 1
            due += self._gap
            self._stop.wait(max(0.0, due - time.monotonic()))

    @property
    def sent(self) -> int:
        return sum(self.outcomes.values())
