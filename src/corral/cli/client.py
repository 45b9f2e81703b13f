"""How the CLI finds and calls the server: CORRAL_URL / CORRAL_API_KEY, else the saved config."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import typer

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings

S = TypeVar("S", bound="BaseSettings")


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(os.environ.get("CORRAL_CONFIG") or Path(base) / "corral" / "config.json")


def save_config(url: str, api_key: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # never readable by others, not even for a moment
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"url": url, "api_key": api_key}, indent=2) + "\n")
    return path


def load_saved() -> tuple[str, str]:
    """The URL and key `corral up` saved ('' when none)."""
    saved: dict[str, str] = {}
    path = config_path()
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
        except ValueError:
            saved = {}
    if not isinstance(saved, dict):
        saved = {}
    return str(saved.get("url") or ""), str(saved.get("api_key") or "")


def load_config() -> tuple[str, str]:
    saved_url, saved_key = load_saved()
    url = os.environ.get("CORRAL_URL") or saved_url or "http://127.0.0.1:8470"
    key = os.environ.get("CORRAL_API_KEY") or saved_key
    return url, key


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def from_env(kind: type[S], **given: Any) -> S:
    """Settings read from the environment (and `given`); one that does not parse or is out of range
    exits 2 naming its variable and what is wrong, never its value (it may be a secret)."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    prefix = str(kind.model_config.get("env_prefix", ""))
    try:
        return kind(**given)
    except ValidationError as exc:
        wrong = [(str(e["loc"][0]), e["msg"]) for e in exc.errors(include_input=False)]
    except SettingsError as exc:  # a value that is not JSON where JSON is read (a mapping)
        found = re.search(r'field "(\w+)"', str(exc))
        wrong = [(found.group(1) if found else "?", "not valid JSON")]
    for field, message in wrong:
        typer.echo(f"error: {prefix}{field.upper()}: {message}", err=True)
    raise typer.Exit(2)


class Api:
    """A thin HTTP client: every error becomes a one-line message and a non-zero exit."""

    def __init__(self) -> None:
        url, key = load_config()
        self.url = url
        if not key:
            raise fail(f"no API key: run `corral up`, or set CORRAL_API_KEY (config: {config_path()})")
        self._http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30.0)

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
