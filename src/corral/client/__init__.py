"""Corral's Python client: `Client` (blocking) and `AsyncClient` (asyncio) over the HTTP API.

    from corral.client import Client

    with Client() as corral:
        s = corral.sessions.submit(command=["python", "train.py"], cluster_size=2)
        print(corral.wait(s.id).status)

docs/client.md has the tour; every result type is in `corral.client.models`.
"""

from corral.client.aio import AsyncClient
from corral.client.errors import CorralError, Unreachable
from corral.client.sync import Client
from corral.client.transport import InvalidRequest, NoApiKey

__all__ = ["AsyncClient", "Client", "CorralError", "InvalidRequest", "NoApiKey", "Unreachable"]
