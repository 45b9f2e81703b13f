"""Errors a service raises for the API (and CLI) to show: status code, code word, named fields."""

from __future__ import annotations

from typing import Any


class CorralError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidInput(CorralError):
    status = 422
    code = "validation_error"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, {"field": field})


class NotFound(CorralError):
    status = 404
    code = "not_found"


class Forbidden(CorralError):
    status = 403
    code = "forbidden"


class Unauthorized(CorralError):
    status = 401
    code = "unauthorized"


class Conflict(CorralError):
    status = 409
    code = "conflict"


class Fenced(CorralError):
    status = 409
    code = "fenced"
