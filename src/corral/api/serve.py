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

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from corral import metrics
from corral.api.errors import error_body
from corral.api.state import State, principal
from corral.api.upstream import Broken, Refused
from corral.api.upstream import Response as Response_
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


@router.api_route("/serve/{deployment}", methods=METHODS, include_in_schema=False)
@router.api_route("/serve/{deployment}/{path:path}", methods=METHODS, include_in_schema=False)
async def serve(deployment: str, request: Request, state: State, path: str = "") -> Response:
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

    target = f"/{path}" + (f"?{request.url.query}" if request.url.query else "")
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
        out = StreamingResponse(
            _relayed(resp, opened),
            status_code=resp.status,
            background=BackgroundTask(_finish, resp, opened),  # also when the stream never started
        )
        # As the replica sent them, repeated ones (Set-Cookie) included.
        heads = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.headers]
        out.raw_headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in _passed(heads, HOP_BY_HOP)
        ]
        return out
    return _refused(dep.name, 502, "no replica answered")


async def _relayed(resp: Response_, opened: Opened) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.body():
            yield chunk
    finally:
        _finish(resp, opened)


def _finish(resp: Response_, opened: Opened) -> None:
    opened.close()
    resp.release()


def _refused(name: str, code: int, message: str) -> JSONResponse:
    metrics.SERVE_REQUESTS.labels(name, str(code)).inc()
    word = "unavailable" if code == 503 else "bad_gateway"
    headers = {"Retry-After": RETRY_AFTER} if code == 503 else {}
    return JSONResponse(error_body(word, message, {"field": "deployment"}), status_code=code, headers=headers)
