"""What both clients share: where the server is, how a request is sent and how an answer is read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from corral.client.endpoint import Call
from corral.client.errors import CorralError, from_response
from corral.saved_config import config_path, load_config

T = TypeVar("T")
API = "/api/v1"
TIMEOUT = 30.0


class NoApiKey(CorralError):
    def __init__(self) -> None:
        super().__init__(
            401,
            "no_api_key",
            f"no API key: run `corral up`, or set CORRAL_API_KEY (config: {config_path()})",
        )


class InvalidRequest(CorralError, ValueError):
    """What was asked cannot be sent at all (NaN, a date, bytes: not JSON); nothing was sent."""

    def __init__(self, reason: str) -> None:
        super().__init__(0, "invalid_request", f"cannot send that as JSON: {reason}")


@dataclass(frozen=True)
class Target:
    """A server and the key to call it with: given, else CORRAL_URL / CORRAL_API_KEY, else the
    config `corral up` saved."""

    url: str
    key: str = ""

    @classmethod
    def of(cls, url: str | None, key: str | None) -> Target:
        found_url, found_key = load_config()
        target = cls((url or found_url).rstrip("/"), key or found_key)
        if not target.key:
            raise NoApiKey
        if not target.key.isprintable() or any(c.isspace() for c in target.key):
            # A pasted key with its line break would fail inside httpx as a header error, which
            # reads as a network fault. The key itself is never shown.
            raise CorralError(
                401, "invalid_api_key", "the API key holds spaces or line breaks: give the key alone"
            )
        return target

    def __repr__(self) -> str:  # never the key
        return f"Target(url={self.url!r})"


def pool(url: str, timeout: float) -> httpx.Client:
    """Connections to `url`. Over plain HTTP no TLS context is made: loading the CA bundle is the
    slowest step of a short command, for a server it never talks TLS to."""
    return httpx.Client(timeout=timeout, verify=url.startswith("https:"))


def async_pool(url: str, timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout, verify=url.startswith("https:"))


def request(http: httpx.Client | httpx.AsyncClient, target: Target, call: Call[Any]) -> httpx.Request:
    try:
        content = None if call.body is None else json.dumps(call.body, allow_nan=False).encode()
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(str(exc)) from None
    headers = {"Authorization": f"Bearer {target.key}"}
    if content is not None:
        headers["Content-Type"] = "application/json"
    return http.build_request(
        call.method, target.url + API + call.path, params=call.params, content=content, headers=headers
    )


def refusal(resp: httpx.Response) -> CorralError:
    """The error an answer of 400 or more is, from its body (read)."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    return from_response(resp.status_code, body, resp.text)


def answer(call: Call[T], resp: httpx.Response) -> T:
    if resp.status_code >= 400:
        raise refusal(resp)
    if resp.status_code == 204:
        return call.read(None)
    try:
        data = resp.json()
    except ValueError:
        raise CorralError(resp.status_code, "http_error", f"not JSON: {resp.text[:200]}") from None
    return call.read(data)
