"""GraphQL at /graphql: a read mirror of the REST API through the same services, so the same
tenancy and the same Bearer key.  Queries only (no mutations, no subscriptions)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import strawberry
from cross_web import HTTPException
from fastapi.routing import APIWebSocketRoute
from graphql import GraphQLError
from starlette.responses import JSONResponse
from strawberry.fastapi import GraphQLRouter
from strawberry.types import ExecutionContext

from corral.api.errors import error_body
from corral.api.graphql.context import context
from corral.api.graphql.errors import ErrorShapes, log_errors
from corral.api.graphql.limits import QueryLimits
from corral.api.graphql.page import DEFAULT_FIRST, MAX_FIRST, SessionConnection, SessionFilter, page
from corral.api.graphql.session import Info, Session, sessions_of
from corral.api.graphql.types import Agent, Me, copied, resolver
from corral.api.routes.users import MeOut
from corral.api.schemas import AgentOut
from corral.protocol.types import clean_text
from corral.services import agents as agent_service
from corral.services import users as user_service
from corral.services.errors import InvalidInput

MAX_ID = 200
"""Longer than any id (a UUID is 36): no session has it, and nothing is read for it."""


@strawberry.type
class Query:
    @resolver("The sessions the caller may see, newest first, a page at a time.")
    async def sessions(
        self,
        info: Info,
        where: Annotated[SessionFilter | None, strawberry.argument(name="filter")] = None,
        first: Annotated[
            int, strawberry.argument(description=f"page size, 1 to {MAX_FIRST}")
        ] = DEFAULT_FIRST,
        after: Annotated[str | None, strawberry.argument(description="an edge's cursor")] = None,
    ) -> SessionConnection:
        return await page(info.context, where, first, after)

    @resolver("One session by its id (or the start of it); null if the caller may not see it.")
    async def session(self, info: Info, id: strawberry.ID) -> Session | None:
        given = str(id)
        if len(given) > MAX_ID:
            return None
        try:
            clean_text(given)
        except ValueError as e:
            raise InvalidInput("id", str(e)) from None
        found = await info.context.loaders.one(given)
        return None if found is None else (await sessions_of(info.context, [found]))[0]

    @resolver("Every agent (admins only).")
    async def agents(self, info: Info) -> list[Agent]:
        found = await agent_service.list_agents(info.context.reader, info.context.who)
        return [Agent.of(AgentOut.of(a)) for a in found]

    @resolver("Who the caller is, and the priority rules that apply to them.")
    async def me(self, info: Info) -> Me:
        out = MeOut(**await user_service.me(info.context.reader, info.context.who))
        return copied(Me, out)


class CorralSchema(strawberry.Schema):
    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        log_errors(errors)


schema = CorralSchema(query=Query, extensions=[QueryLimits, ErrorShapes])

_CODES = {400: "malformed_body", 404: "not_found", 405: "method_not_allowed", 415: "unsupported_media_type"}


class Router(GraphQLRouter[Any, None]):
    """strawberry's router, with its refusals of a request (no query, a body that is no JSON, a
    mutation sent by GET) in Corral's error format instead of plain text."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # No subscriptions, so no WebSocket: strawberry's route would solve the HTTP caller's
        # dependencies for a WebSocket, and fail on them.
        self.routes[:] = [r for r in self.routes if not isinstance(r, APIWebSocketRoute)]

    def parse_json(self, data: str | bytes) -> Any:
        """A body (or a GET's `variables`) must be a JSON object, in UTF-8; strawberry's own
        parsing fails on anything else with an exception of its own (a 500)."""
        try:
            value = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise HTTPException(400, "Unable to parse request body as JSON (UTF-8)") from e
        if not isinstance(value, dict | list):
            raise HTTPException(400, 'the request must be a JSON object: {"query": ..., "variables": {...}}')
        return value

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().run(*args, **kwargs)
        except HTTPException as e:
            code = _CODES.get(e.status_code, "bad_request")
            return JSONResponse(error_body(code, e.reason, {"field": "body"}), status_code=e.status_code)


def router() -> GraphQLRouter[Any, None]:
    """The /graphql routes: POST and GET (queries only).  No in-browser IDE: one loads its
    scripts from a CDN, which the manager never makes a browser do."""
    return Router(
        schema,
        path="/graphql",
        graphql_ide=None,
        context_getter=context,
        include_in_schema=False,
    )
