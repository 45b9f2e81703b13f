"""How the CLI reaches Corral: through `corral.client`, imported only by the commands that call."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from corral.client import Client
    from corral.client.errors import CorralError


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def connect() -> Client:
    """A client for CORRAL_URL / CORRAL_API_KEY, else what `corral up` saved. Its errors reach
    `main`, which prints them as one line (`refused`)."""
    from corral.client import Client

    return Client()


def refused(exc: CorralError) -> int:
    """Print an API error as one line, field included; the exit status: 2 for a request refused as
    invalid (400, 422, or one that cannot be sent), else 1."""
    typer.echo(f"error: {exc}", err=True)
    return 2 if exc.status in (0, 400, 422) and exc.code != "unreachable" else 1
