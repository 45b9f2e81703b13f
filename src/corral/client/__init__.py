"""Corral's Python client: `Client` (blocking) and `AsyncClient` (asyncio) over the HTTP API.

    from corral.client import Client

    with Client() as corral:
        s = corral.sessions.submit(command=["python", "train.py"], cluster_size=2)
        print(corral.wait(s.id).status)

docs/client.md has the tour; every result type is in `corral.client.models`.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any

from corral.client.errors import CorralError, Unreachable

# httpx's own command-line tool, which `import httpx` loads unless it is missing, imports click,
# pygments and rich: a third of the import, for a tool no Corral process runs.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

if TYPE_CHECKING:
    from corral.client.aio import AsyncClient
    from corral.client.sync import Client
    from corral.client.transport import InvalidRequest, NoApiKey

__all__ = ["AsyncClient", "Client", "CorralError", "InvalidRequest", "NoApiKey", "Unreachable"]

# httpx and pydantic load on first use: `corral --help`, and the CLI's error handling, need
# neither (PEP 562).
_LAZY = {
    "Client": "corral.client.sync",
    "AsyncClient": "corral.client.aio",
    "InvalidRequest": "corral.client.transport",
    "NoApiKey": "corral.client.transport",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'corral.client' has no attribute {name!r}")
