"""Rendering: one Jinja2 environment (autoescaped), whole pages or one block of them for htmx."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from jinja2_fragments.fastapi import Jinja2Blocks

from corral.clock import utcnow
from corral.services.web_sessions import Viewer

HERE = Path(__file__).resolve().parent
templates = Jinja2Blocks(directory=str(HERE / "templates"))


def age(t: datetime | None, now: datetime | None = None) -> str:
    """How long ago, in the largest whole unit: 42s, 5m, 3h, 2d."""
    if t is None:
        return ""
    seconds = max(0, int(((now or utcnow()) - t.astimezone(UTC)).total_seconds()))
    for size, unit in ((86_400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def when(t: datetime | None) -> str:
    return "" if t is None else t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


templates.env.filters["age"] = age
templates.env.filters["when"] = when
templates.env.globals["now"] = utcnow


def page(
    request: Request,
    name: str,
    viewer: Viewer | None,
    status: int = 200,
    block: str | None = None,
    **context: Any,
) -> Response:
    """The template `name` (or only its `block`, for an htmx request asking for one)."""
    context = {"viewer": viewer, "who": viewer.who if viewer else None, **context}
    response = templates.TemplateResponse(request, name, context, status_code=status, block_name=block)
    response.headers["cache-control"] = "no-store"
    return response
