"""Where a client finds Corral: the URL and admin key `corral up` saves for the CLI (mode 600)."""

from __future__ import annotations

import json
import os
from pathlib import Path


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
    """The server and key a client uses: CORRAL_URL / CORRAL_API_KEY, else what was saved."""
    saved_url, saved_key = load_saved()
    url = os.environ.get("CORRAL_URL") or saved_url or "http://127.0.0.1:8470"
    key = os.environ.get("CORRAL_API_KEY") or saved_key
    return url, key
