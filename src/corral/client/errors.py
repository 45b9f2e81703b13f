"""What a call raises: the API's error body, or why no answer came."""

from __future__ import annotations

from typing import Any


class CorralError(Exception):
    """The API refused a call: its status and error body `{"code", "message", "details"}`.

    `field` is the request field it names, if any (`details.field`), as in
    `validation_error: resources.cpu: Input should be greater than 0`.
    """

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details or {}

    @property
    def field(self) -> str | None:
        field = self.details.get("field")
        return field if isinstance(field, str) else None

    def __str__(self) -> str:
        return self.message + (f" (field: {self.field})" if self.field else "")

    def __repr__(self) -> str:
        return f"CorralError(status={self.status}, code={self.code!r}, message={self.message!r})"


class Unreachable(CorralError):
    """No answer: the server is down, the address wrong, or the connection broke mid-call."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(0, "unreachable", f"cannot reach Corral at {url}: {reason}")
        self.url = url


def from_response(status: int, body: Any, text: str) -> CorralError:
    """The error a non-2xx answer stands for; a body not in the API's format (a proxy's page, say)
    becomes `http_error` with the start of its text."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        details = err.get("details")
        return CorralError(
            status,
            str(err.get("code") or "error"),
            err["message"],
            details if isinstance(details, dict) else {},
        )
    return CorralError(status, "http_error", f"HTTP {status}: {text[:200]}")
