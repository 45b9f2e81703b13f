"""GraphQL errors in Corral's terms: each carries the code and details REST would give in its error
body (`extensions.code`, `extensions.details`); an unexpected failure says only "internal error"
(its traceback goes to the manager log, never to the client)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import structlog
from graphql import ExecutionResult as GraphQLResult
from graphql import GraphQLError
from strawberry.extensions import SchemaExtension
from strawberry.types import ExecutionResult

from corral.api.errors import error_body
from corral.domain.errors import Unavailable
from corral.services.errors import CorralError

log = structlog.get_logger("corral.api")

INTERNAL = "internal error; see the manager log"
UNAVAILABLE = "the database cannot be reached; try again in a second"


def _again(error: GraphQLError, message: str, extensions: dict[str, Any]) -> GraphQLError:
    return GraphQLError(
        message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        extensions=extensions,
    )


def shaped(error: GraphQLError) -> GraphQLError:
    cause = error.original_error
    if isinstance(cause, CorralError):
        body = error_body(cause.code, cause.message, cause.details)["error"]
        return _again(error, body["message"], {"code": body["code"], "details": body["details"]})
    if isinstance(cause, Unavailable):
        return _again(error, UNAVAILABLE, {"code": "database_unavailable", "details": {}})
    if cause is None or isinstance(cause, GraphQLError):
        # The query itself is wrong (syntax, an unknown field, a variable of the wrong type) or
        # over a limit: graphql-core's message says where.
        code = (error.extensions or {}).get("code", "invalid_query")
        details = (error.extensions or {}).get("details", {})
        return _again(error, error.message, {"code": code, "details": details})
    return _again(error, INTERNAL, {"code": "internal", "details": {}})


def unexpected(errors: list[GraphQLError]) -> Iterator[tuple[GraphQLError, BaseException]]:
    """Those of `errors` that are no answer to the query but a failure of the server."""
    for e in errors:
        cause = e.original_error
        if cause is not None and not isinstance(cause, CorralError | GraphQLError | Unavailable):
            yield e, cause


def log_errors(errors: list[GraphQLError]) -> None:
    """What the manager log says of a query's errors: a caller's mistake is no server event."""
    for e in errors:
        if isinstance(e.original_error, Unavailable):
            log.warning("database unreachable", error=str(e.original_error))
    for e, cause in unexpected(errors):
        log.error("unhandled error in a GraphQL resolver", path=e.path, exc_info=cause)


class ErrorShapes(SchemaExtension):
    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        if isinstance(result, GraphQLResult | ExecutionResult) and result.errors:
            result.errors = [shaped(e) for e in result.errors]
