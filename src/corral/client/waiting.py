"""How the clients poll: quickly at first, then every half second, within an optional deadline."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

FIRST = 0.05
MOST = 0.5


@dataclass
class Backoff:
    delay: float = FIRST

    def next(self) -> float:
        now = self.delay
        self.delay = min(self.delay * 1.5, MOST)
        return now


@dataclass
class Deadline:
    timeout: float | None
    start: float = field(default_factory=time.monotonic)

    def clip(self, delay: float, what: str) -> float:
        """`delay`, or less to end at the deadline; past it, `TimeoutError` naming `what`."""
        if self.timeout is None:
            return delay
        left = self.timeout - (time.monotonic() - self.start)
        if left <= 0:
            raise TimeoutError(f"timed out after {self.timeout:g} s waiting for {what}")
        return min(delay, left)
