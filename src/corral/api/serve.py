"""`/serve/{deployment}/{path}`: the manager proxies a request to one of the deployment's replicas
in traffic, round-robin (DESIGN §7: the one documented exception to "the manager never dials an
agent"; it dials the replica address its agent reported).

Any method; bodies stream both ways; headers pass but hop-by-hop ones, the caller's
`Authorization` and Corral's cookie (user code never sees a Corral key); `X-Forwarded-For`,
`-Proto` and `-Host` are added.  A connection refused before any byte was sent is tried once more
on the next route; with no route in traffic the answer is 503 with `Retry-After`.  A deployment
answers only callers of its project (with a key, or signed in), unless it is `public`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import structlog
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from corral import metrics
from corral.api.errors import error_body
from corral.api.state import AppState, principal
from corral.http1 import Broken, Refused
from corral.http1 import Response as Upstream_
from corral.services.errors import CorralError, InvalidInput
from corral.services.serve import Opened
from corral.services.web_sessions import COOKIE

log = structlog.get_logger("corral.serve")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
RETRY_AFTER = "1"


def _passed(items: list[tuple[str, str]], drop: frozenset[str]) -> list[tuple[str, str]]:
    """The headers but `drop` and those the Connection header names (hop-by-hop too)."""
    named = {v.strip().lower() for k, v in items if k.lower() == "connection" for v in v.split(",")}
    return [(k, v) for k, v in items if k.lower() not in drop and k.lower() not in named]


def _cookies_but_ours(value: str) -> str:
    kept = [c for c in value.split(";") if c.strip().partition("=")[0] != COOKIE]
    return ";".join(kept).strip()


FORWARDED = frozenset({"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"})


def _request_headers(request: Request, address: str) -> list[tuple[str, str]]:
    items = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.scope["headers"]]
    out = [("Host", address)]
    for k, v in _passed(items, HOP_BY_HOP | FORWARDED | {"authorization", "host"}):
        if k.lower() == "cookie":
            v = _cookies_but_ours(v)
            if not v:
                continue
        out.append((k, v))
    if "content-length" not in request.headers and "chunked" in request.headers.get("transfer-encoding", ""):
        out.append(("Transfer-Encoding", "chunked"))  # the body streams on, framed anew
    client = request.client.host if request.client else ""
    before = request.headers.get("x-forwarded-for")
    out += [
        ("X-Forwarded-For", f"{before}, {client}" if before else client),
        ("X-Forwarded-Proto", request.url.scheme),
        ("X-Forwarded-Host", request.headers.get("host", "")),
    ]
    return out


class ServeFirst:
    """`/serve/...` is proxied here, before FastAPI's routing and middleware: a proxied request pays
    for none of them (bench/serve.py), and its body streams with no size limit (the API's
    CORRAL_MAX_REQUEST_BYTES is for the API's own bodies).  Refusals are the API's JSON errors."""

    def __init__(self, app: ASGIApp, fastapi: FastAPI) -> None:
        self.app = app
        self.fastapi = fastapi

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == PREFIX[:-1] or path.startswith(PREFIX)):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await proxied(request, self.fastapi.state.corral)
        except CorralError as exc:
            response = JSONResponse(error_body(exc.code, exc.message, exc.details), exc.status)
        try:
            await response(scope, receive, send)
        except Broken as exc:  # the replica failed mid-answer: the client's connection is cut
            log.warning("a replica failed mid-answer", path=path[:200], error=str(exc))


PREFIX = "/serve/"


async def proxied(request: Request, state: AppState) -> Response | Relay:
    """The replica's answer to `request` (a 4xx or 5xx of ours when there is none)."""
    rest = request.url.path[len(PREFIX) :] if request.url.path.startswith(PREFIX) else ""
    deployment, _, _ = rest.partition("/")
    raw = request.scope.get("raw_path") or request.url.path.encode()
    path = raw.decode("latin-1")[len(PREFIX) + len(deployment.encode()) :] or "/"
    if "\x00" in request.url.path:
        raise InvalidInput("path", "path: must not contain NUL bytes")
    started = time.perf_counter()
    credentials = "authorization" in request.headers or COOKIE in request.cookies
    who = await principal(request, state) if credentials else None
    dep, targets = await state.proxy.target(deployment, who)
    if not targets:
        return _refused(dep.name, 503, f"deployment {dep.name!r} has no replica in traffic ({dep.status})")
    sent = consumed = False

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent, consumed
        if consumed:
            return  # a try before read it all, and it was empty (else `sent`: no other try)
        async for chunk in request.stream():
            sent = sent or bool(chunk)
            yield chunk
        consumed = True

    target = path + (f"?{request.url.query}" if request.url.query else "")
    for attempt, route in enumerate(targets[:2]):
        assert route.address is not None  # in traffic: it has one (store/routes.set_traffic)
        opened = state.proxy.opened(route.id)
        try:
            resp = await state.upstream.send(
                route.address, request.method, target, _request_headers(request, route.address), body()
            )
        except Refused:
            opened.close()
            if sent or attempt == 1 or len(targets) == 1:
                return _refused(dep.name, 502, f"replica {route.address} refused the connection")
            continue
        except Broken as exc:
            opened.close()
            return _refused(dep.name, 502, f"replica {route.address} failed: {exc}")
        except BaseException:
            opened.close()
            raise
        metrics.SERVE_SECONDS.labels(dep.name).observe(time.perf_counter() - started)
        metrics.SERVE_REQUESTS.labels(dep.name, str(resp.status)).inc()
        # As the replica sent them, repeated ones (Set-Cookie) included.
        heads = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.headers]
        return Relay(
            resp,
            opened,
            [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in _passed(heads, HOP_BY_HOP)],
        )
    return _refused(dep.name, 502, "no replica answered")


class Relay:
    """The replica's answer, relayed as it arrives (an ASGI app for this one request).  An answer of
    unknown length (a stream) also watches for the caller leaving, and then stops reading it; one
    with a Content-Length is relayed to its end (it has one)."""

    def __init__(self, resp: Upstream_, opened: Opened, headers: list[tuple[bytes, bytes]]) -> None:
        self.resp, self.opened, self.headers = resp, opened, headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        known = any(k == b"content-length" for k, _ in self.headers)
        gone = None if known else asyncio.ensure_future(_left(receive))
        try:
            await send({"type": "http.response.start", "status": self.resp.status, "headers": self.headers})
            async for chunk in self.resp.body():
                if gone is not None and gone.done():
                    return  # the caller left: the replica's connection is closed, not kept
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if gone is not None:
                gone.cancel()
            self.opened.close()
            self.resp.release()


async def _left(receive: Receive) -> None:
    """Returns once the caller has disconnected (its request body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _refused(name: str, code: int, message: str) -> JSONResponse:
    metrics.SERVE_REQUESTS.labels(name, str(code)).inc()
    word = "unavailable" if code == 503 else "bad_gateway"
    headers = {"Retry-After": RETRY_AFTER} if code == 503 else {}
    return JSONResponse(error_body(word, message, {"field": "deployment"}), status_code=code, headers=headers)
