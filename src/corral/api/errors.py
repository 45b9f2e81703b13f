"""The error format of DESIGN §8: {"error": {"code", "message", "details"}}; never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from corral.domain.errors import Unavailable
from corral.protocol.types import safe_text
from corral.services.errors import CorralError, InvalidInput

log = structlog.get_logger("corral.api")


def _safe(value: Any) -> Any:
    """Echoed input may hold lone surrogates or NULs: the error itself must always encode."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {_safe(k): _safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe(v) for v in value]
    return value


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": _safe(message), "details": _safe(details or {})}}


def _field(loc: tuple[Any, ...]) -> str:
    """`("body", "health", "path")` is `health.path`: the first part says where (body, query,
    path, header), the rest is the field, whatever its name."""
    where = loc[1:] if loc and loc[0] in ("body", "query", "path", "header", "cookie") else loc
    parts = [str(p) for p in where if p != "[key]"]
    return ".".join(parts) or "body"


def install(app: FastAPI, pages: Callable[[Request, CorralError], Response] | None = None) -> None:
    """`pages`: how a service's refusal is shown under /ui/ (a page, not JSON)."""

    @app.exception_handler(CorralError)
    async def _corral(request: Request, exc: CorralError) -> Response:
        if pages is not None and request.url.path.startswith("/ui/"):
            return pages(request, exc)
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse(
                error_body("malformed_json", "the request body is not valid JSON", {"field": "body"}),
                status_code=400,
            )
        fields = [_field(tuple(e.get("loc", ()))) for e in errors]
        message = "; ".join(f"{f}: {e.get('msg', 'invalid')}" for f, e in zip(fields, errors, strict=True))
        if pages is not None and request.url.path.startswith("/ui/"):
            return pages(request, InvalidInput(fields[0], message))
        return JSONResponse(
            error_body("validation_error", message, {"field": fields[0], "fields": fields}), status_code=422
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized", 413: "body_too_large"}.get(
            exc.status_code, "error"
        )
        if exc.status_code == 400:  # the body could not be parsed at all (not UTF-8, nested too deep)
            code = "malformed_body"
        details = {"field": "body"} if exc.status_code in (400, 413) else None
        return JSONResponse(error_body(code, str(exc.detail), details), status_code=exc.status_code)

    @app.exception_handler(Unavailable)
    async def _no_database(_: Request, exc: Unavailable) -> JSONResponse:
        if exc.maybe_applied:
            # A connection that died under the request (a database restart): the pool has replaced
            # it.  It may have died in COMMIT, after the write was made: a request that creates
            # something is safe to send again only with its creation_id.
            log.warning("database connection lost during a request", error=str(exc))
            return _unavailable(
                "the database connection was lost during the request; it may or may not have been applied"
            )
        log.warning("database unreachable", error=str(exc))
        # Most requests were turned away before writing; one that reads back what it committed on
        # a second connection was not, hence "may".
        return _unavailable("the database cannot be reached; the request may not have been applied")

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", error=repr(exc))
        return JSONResponse(error_body("internal", "internal error; see the manager log"), status_code=500)


def _unavailable(what: str) -> JSONResponse:
    """503 database_unavailable: the client may send the request again in a second."""
    message = f"{what} (a create sent again with the same creation_id is applied once)"
    return JSONResponse(
        error_body("database_unavailable", message), status_code=503, headers={"Retry-After": "1"}
    )
