"""Reading server-sent events (the WHATWG EventSource format) as the clients' streams do.

A stream is followed the way a browser's EventSource follows one: when it ends or the connection
drops, it is opened again with `Last-Event-ID`, the id of the last message read, so nothing is
missed or read twice; `event: resync` (the server found the reader too slow) names where to go on."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

STREAM_READ_TIMEOUT = 60.0
"""Seconds a stream may stay silent before it is taken as dropped (the server speaks every 15)."""
RETRY_FIRST = 0.2
RETRY_MOST = 5.0


@dataclass(frozen=True)
class Message:
    event: str = "message"
    data: str = ""
    id: str | None = None

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class Parser:
    """Lines in, messages out: `data:` lines joined, `:` comments (heartbeats) dropped.  As in
    EventSource, an `id:` with no data moves `last_id` without a message (a stream's opening
    names where it starts)."""

    last_id: str | None = None
    _data: list[str] = field(default_factory=list)
    _event: str = ""
    _id: str | None = None

    def feed(self, line: str) -> Message | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> Message | None:
        if self._id is not None:
            self.last_id = self._id
        data, event = self._data, self._event
        self._data, self._event, self._id = [], "", None
        if not data:
            return None
        return Message(event or "message", "\n".join(data), self.last_id)


def messages(lines: Iterable[str], parser: Parser) -> Iterator[Message]:
    for line in lines:
        found = parser.feed(line)
        if found is not None:
            yield found


@dataclass
class Retry:
    """The pause before opening a dropped stream again: short at first, then up to RETRY_MOST."""

    delay: float = RETRY_FIRST

    def next(self) -> float:
        now = self.delay
        self.delay = min(self.delay * 2, RETRY_MOST)
        return now


def event_params(
    type: list[str] | None, session: str | None, array: str | None, project: str | None
) -> dict[str, Any]:
    """`/events/stream`'s filters as query parameters (those not given left out)."""
    given = {"type": type, "session": session, "array": array, "project": project}
    return {k: v for k, v in given.items() if v}


def resumed(headers: dict[str, str], last_id: str | None) -> dict[str, str]:
    return headers if last_id is None else {**headers, "Last-Event-ID": last_id}
