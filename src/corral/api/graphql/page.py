"""A page of sessions as a Relay-style connection: edges with opaque cursors, and the page's info.

A cursor is a position in the caller's list, newest first, as REST's `offset`: a session created
while a client pages moves the ones after it by one (the same session may show on two pages)."""

from __future__ import annotations

import base64
import binascii

import strawberry

from corral.api.graphql.context import Context
from corral.api.graphql.session import Session, sessions_of
from corral.domain.status import SessionStatus
from corral.protocol.types import INT64_MAX, clean_text
from corral.services import sessions as svc
from corral.services.errors import InvalidInput

DEFAULT_FIRST = 100
MAX_FIRST = 1000
"""As REST's `limit`."""
MAX_ARRAY_ID = 64
_PREFIX = "sessions:"


@strawberry.input(description="Which sessions: every condition given must hold.")
class SessionFilter:
    status: list[SessionStatus] | None = strawberry.field(default=None, description="any of these statuses")
    array_id: str | None = strawberry.field(default=None, description="only this job array's elements")


@strawberry.type
class PageInfo:
    has_next_page: bool
    has_previous_page: bool
    start_cursor: str | None
    end_cursor: str | None


@strawberry.type
class SessionEdge:
    cursor: str = strawberry.field(description="pass it as `after` to read on from this session")
    node: Session


@strawberry.type(description="A page of sessions, newest first (an array's elements by index).")
class SessionConnection:
    edges: list[SessionEdge]
    nodes: list[Session] = strawberry.field(description="the edges' nodes, for clients that need no cursor")
    page_info: PageInfo


def cursor(position: int) -> str:
    return base64.urlsafe_b64encode(f"{_PREFIX}{position}".encode()).decode()


def position(given: str) -> int:
    """The position a cursor of `cursor` names; 422 for anything else."""
    try:
        text = base64.urlsafe_b64decode(given.encode("ascii", "strict")).decode("ascii")
    except (UnicodeError, binascii.Error, ValueError):
        text = ""
    number = text.removeprefix(_PREFIX)
    if not text.startswith(_PREFIX) or not number.isascii() or not number.isdigit() or len(number) > 19:
        raise InvalidInput("after", "not a cursor of this API: pass an edge's `cursor` or `endCursor`")
    found = int(number)
    if found >= INT64_MAX:
        raise InvalidInput("after", "cursor out of range")
    return found


def _checked(where: SessionFilter | None) -> tuple[list[str], str | None]:
    if where is None:
        return [], None
    array_id = where.array_id
    if array_id is not None:
        if len(array_id) > MAX_ARRAY_ID:
            raise InvalidInput("filter.arrayId", f"at most {MAX_ARRAY_ID} characters")
        try:
            clean_text(array_id)
        except ValueError as e:
            raise InvalidInput("filter.arrayId", str(e)) from None
    return [str(s) for s in where.status or []], array_id


async def page(ctx: Context, where: SessionFilter | None, first: int, after: str | None) -> SessionConnection:
    if not 1 <= first <= MAX_FIRST:
        raise InvalidInput("first", f"must be between 1 and {MAX_FIRST}")
    statuses, array_id = _checked(where)
    offset = 0 if after is None else position(after) + 1
    # One more than asked: whether a next page exists, without counting.
    found = await svc.list_visible(ctx.reader, ctx.who, statuses, first + 1, offset, array_id=array_id)
    records = found[:first]
    nodes = await sessions_of(ctx, records)
    edges = [SessionEdge(cursor=cursor(offset + i), node=n) for i, n in enumerate(nodes)]
    info = PageInfo(
        has_next_page=len(found) > first,
        has_previous_page=offset > 0,
        start_cursor=edges[0].cursor if edges else None,
        end_cursor=edges[-1].cursor if edges else None,
    )
    return SessionConnection(edges=edges, nodes=nodes, page_info=info)
