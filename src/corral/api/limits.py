"""Request size limits, enforced before a body is read into memory (README "Limits")."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.api.errors import error_body


class BodyLimit:
    """413 for a body over the limit: at once from Content-Length, else as soon as it is exceeded."""

    def __init__(self, app: ASGIApp, user_limit: int, agent_limit: int) -> None:
        self.app = app
        self.user_limit = user_limit
        self.agent_limit = agent_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.agent_limit if scope["path"].startswith("/api/v1/agent/") else self.user_limit
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _refuse(send, limit)
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


async def _refuse(send: Send, limit: int) -> None:
    body = json.dumps(error_body("body_too_large", too_large(limit), {"field": "body"})).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
