"""`/serve/{deployment}/{path}`: the manager proxies a request to one of the deployment's replicas
in traffic, round-robin (DESIGN §7: the one documented exception to "the manager never dials an
agent"; it dials the replica address its agent reported).

Any method; bodies stream both ways; headers pass but hop-by-hop ones, the caller's
`Authorization` and Corral's cookie (user code never sees a Corral key); `X-Forwarded-For`,
`-Proto` and `-Host` are added.  A connection refused before any byte was sent is tried once more
on the next route; with no route in traffic the answer is 503 with `Retry-After`.  A deployment
answers only callers of its project (with a key, or signed in), unless it is `public`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from corral import metrics
from corral.api.errors import error_body
from corral.api.state import State, principal
from corral.services.serve import Opened
from corral.services.web_sessions import COOKIE

router = APIRouter(tags=["serve"])

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
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
RETRY_AFTER = "1"


def _passed(headers: httpx.Headers | list[tuple[str, str]], drop: frozenset[str]) -> list[tuple[str, str]]:
    items = headers.multi_items() if isinstance(headers, httpx.Headers) else headers
    named = {v.strip().lower() for k, v in items if k.lower() == "connection" for v in v.split(",")}
    return [(k, v) for k, v in items if k.lower() not in drop and k.lower() not in named]


def _cookies_but_ours(value: str) -> str:
    kept = [c for c in value.split(";") if c.strip().partition("=")[0] != COOKIE]
    return ";".join(kept).strip()


def _request_headers(request: Request) -> list[tuple[str, str]]:
    items = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.scope["headers"]]
    out = []
    for k, v in _passed(items, HOP_BY_HOP | {"authorization", "host"}):
        if k.lower() == "cookie":
            v = _cookies_but_ours(v)
            if not v:
                continue
        out.append((k, v))
    client = request.client.host if request.client else ""
    before = request.headers.get("x-forwarded-for")
    out = [
        (k, v)
        for k, v in out
        if k.lower() not in ("x-forwarded-for", "x-forwarded-proto", "x-forwarded-host")
    ]
    out += [
        ("X-Forwarded-For", f"{before}, {client}" if before else client),
        ("X-Forwarded-Proto", request.url.scheme),
        ("X-Forwarded-Host", request.headers.get("host", "")),
    ]
    return out


@router.api_route("/serve/{deployment}", methods=METHODS, include_in_schema=False)
@router.api_route("/serve/{deployment}/{path:path}", methods=METHODS, include_in_schema=False)
async def serve(deployment: str, request: Request, state: State, path: str = "") -> Response:
    started = time.perf_counter()
    credentials = "authorization" in request.headers or COOKIE in request.cookies
    who = await principal(request, state) if credentials else None
    dep, targets = await state.proxy.target(deployment, who)
    if not targets:
        return _refused(dep.name, 503, f"deployment {dep.name!r} has no replica in traffic ({dep.status})")
    headers = _request_headers(request)
    sent = False

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        async for chunk in request.stream():
            sent = True
            yield chunk

    target = f"/{path}" + (f"?{request.url.query}" if request.url.query else "")
    http = state.proxy.http
    for attempt, route in enumerate(targets[:2]):
        req = http.build_request(
            request.method, f"http://{route.address}{target}", headers=headers, content=body()
        )
        opened = state.proxy.opened(route.id)
        try:
            resp = await http.send(req, stream=True)
        except httpx.ConnectError:
            opened.close()
            if sent or attempt == 1 or len(targets) == 1:
                return _refused(dep.name, 502, f"replica {route.address} refused the connection")
            continue
        except httpx.HTTPError as exc:
            opened.close()
            return _refused(dep.name, 502, f"replica {route.address} failed: {type(exc).__name__}")
        metrics.SERVE_SECONDS.labels(dep.name).observe(time.perf_counter() - started)
        metrics.SERVE_REQUESTS.labels(dep.name, str(resp.status_code)).inc()
        out = StreamingResponse(
            _relayed(resp, opened),
            status_code=resp.status_code,
            background=BackgroundTask(_finish, resp, opened),  # also when the stream never started
        )
        # As the replica sent them, repeated ones (Set-Cookie) included.
        passed = _passed(resp.headers, HOP_BY_HOP)
        out.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in passed]
        return out
    return _refused(dep.name, 502, "no replica answered")


async def _relayed(resp: httpx.Response, opened: Opened) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.aiter_raw():
            yield chunk
    finally:
        await _finish(resp, opened)


async def _finish(resp: httpx.Response, opened: Opened) -> None:
    opened.close()
    await resp.aclose()


def _refused(name: str, code: int, message: str) -> JSONResponse:
    metrics.SERVE_REQUESTS.labels(name, str(code)).inc()
    word = "unavailable" if code == 503 else "bad_gateway"
    headers = {"Retry-After": RETRY_AFTER} if code == 503 else {}
    return JSONResponse(error_body(word, message, {"field": "deployment"}), status_code=code, headers=headers)
