"""GraphQL at /graphql (strawberry): a read mirror of the REST model through the same services."""

from __future__ import annotations

from corral.api.graphql.schema import router, schema

__all__ = ["router", "schema"]
