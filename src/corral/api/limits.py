"""Request limits, enforced before a body is read into memory (README "Limits"): its size, and no
NUL byte in the URL (PostgreSQL cannot store one, and every route would fail on it with a 500)."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.api.errors import error_body


class BodyLimit:
    """413 for a body over the limit: at once from Content-Length, else as soon as it is exceeded;
    422 for a NUL byte in the path or the query."""

    def __init__(self, app: ASGIApp, user_limit: int, agent_limit: int) -> None:
        self.app = app
        self.user_limit = user_limit
        self.agent_limit = agent_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        field = _nul_in(scope)
        if field is not None:
            await _refuse(send, 422, "validation_error", f"{field}: must not contain NUL bytes", field)
            return
        limit = self.agent_limit if scope["path"].startswith("/api/v1/agent/") else self.user_limit
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _refuse(send, 413, "body_too_large", too_large(limit), "body")
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                raise HTTPException(413, too_large(limit))
            return message

        await self.app(scope, counted, send)


def too_large(limit: int) -> str:
    return f"request body larger than {limit} bytes"


def _nul_in(scope: Scope) -> str | None:
    """Where a NUL byte is: "path", the name of the query parameter holding it, or None."""
    if "\x00" in scope["path"]:
        return "path"
    query = scope.get("query_string", b"")
    if b"%00" in query.lower() or b"\x00" in query:
        for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if "\x00" in name or "\x00" in value:
                return name.replace("\x00", "\\x00") or "query"
        return "query"
    return None


async def _refuse(send: Send, status: int, code: str, message: str, field: str) -> None:
    body = json.dumps(error_body(code, message, {"field": field})).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
