"""How the CLI finds and calls the server: CORRAL_URL / CORRAL_API_KEY, else the saved config."""

from __future__ import annotations

from typing import Any

import httpx
import typer

from corral.saved_config import config_path, load_config


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


class Api:
    """A thin HTTP client: every error becomes a one-line message and a non-zero exit."""

    def __init__(self) -> None:
        url, key = load_config()
        self.url = url
        if not key:
            raise fail(f"no API key: run `corral up`, or set CORRAL_API_KEY (config: {config_path()})")
        self._http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30.0)

    def anew(self) -> Api:
        """A client of its own for the same server: after Ctrl-C interrupted a request, this one's
        connection pool may be left mid-request, and the next request on it fail inside httpx (so
        it is not even closed)."""
        return Api()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            resp = self._http.request(method, "/api/v1" + path, **kwargs)
        except httpx.HTTPError as exc:
            raise fail(f"cannot reach Corral at {self.url}: {exc}") from exc
        except (ValueError, TypeError) as exc:  # e.g. NaN, a YAML date: not JSON
            raise fail(f"cannot send that as JSON: {exc}", 2) from None
        if resp.status_code >= 400:
            try:
                err = resp.json()["error"]
                field = err.get("details", {}).get("field")
                message = err["message"] + (f" (field: {field})" if field else "")
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {resp.status_code}: {resp.text[:200]}"
            raise fail(message, 2 if resp.status_code in (400, 422) else 1)
        return resp.json() if resp.status_code != 204 else None
