"""How much one GraphQL query may ask for: its size in tokens (at parse), its depth and its cost
(before execution).  A query past a limit is refused with a GraphQL error naming the limit, and
nothing of it runs.

Depth and cost are measured in one walk of the operation in which each fragment is measured once:
a fragment spread many times is not walked again, so a query built to take exponential time
(fragments that each spread the next twice) is measured in time linear in its size."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import ExecutionResult, GraphQLError
from graphql.language import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    VariableNode,
)
from strawberry.extensions import SchemaExtension

from corral.api.graphql.page import DEFAULT_FIRST, MAX_FIRST

MAX_TOKENS = 2000
"""Per document; what a client writes by hand is a few hundred."""
MAX_DEPTH = 10
"""Levels of fields that have fields of their own: `{ me { name } }` is 1 deep."""
MAX_COST = 100_000
"""Every field asked for costs 1 for each time it may be answered: a page multiplies what is
asked of each of its sessions by its `first`, a list of a session by LIST_SIZES."""

LIST_SIZES = {"attempts": 10, "kernels": 10, "errors": 10, "history": 20, "agents": 100}
"""What a list counts for when its length is not known before it is read."""
INTROSPECTION_SIZE = 10
"""The same for each list of the schema's own description (types, fields, args...)."""


@dataclass(frozen=True)
class Measure:
    depth: int
    cost: int


ZERO = Measure(0, 0)


class _Walk:
    def __init__(self, document: DocumentNode, variables: Mapping[str, Any], defaults: Mapping[str, Any]):
        self.fragments = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        self.variables = variables
        self.defaults = defaults
        self.measured: dict[str, Measure] = {}
        self.open: set[str] = set()

    def selections(self, node: SelectionSetNode | None) -> Measure:
        depth = cost = 0
        for s in node.selections if node is not None else ():
            if isinstance(s, FieldNode):
                m = self.field(s)
            elif isinstance(s, InlineFragmentNode):
                m = self.selections(s.selection_set)
            elif isinstance(s, FragmentSpreadNode):
                m = self.fragment(s.name.value)
            else:
                m = ZERO
            depth, cost = max(depth, m.depth), cost + m.cost
        return Measure(depth, cost)

    def fragment(self, name: str) -> Measure:
        if name in self.measured:
            return self.measured[name]
        found = self.fragments.get(name)
        if found is None or name in self.open:
            return ZERO  # unknown or cyclic: validation has refused the document already
        self.open.add(name)
        self.measured[name] = m = self.selections(found.selection_set)
        self.open.discard(name)
        return m

    def field(self, node: FieldNode) -> Measure:
        if node.selection_set is None:
            return Measure(0, 1)
        inner = self.selections(node.selection_set)
        name = node.name.value
        if name.startswith("__"):
            # The schema's own description (__schema, __type): not counted in depth, as in
            # graphql-depth-limit (a client's introspection query is deeper than any of ours),
            # but its lists cost, so that a query nesting them deep is refused all the same.
            return Measure(0, 1 + inner.cost)
        return Measure(1 + inner.depth, 1 + self.size(node) * inner.cost)

    def size(self, node: FieldNode) -> int:
        name = node.name.value
        if name == "sessions":
            return max(0, min(self._first(node), MAX_FIRST))
        if name in _INTROSPECTION_LISTS:
            return INTROSPECTION_SIZE
        return LIST_SIZES.get(name, 1)

    def _first(self, node: FieldNode) -> int:
        arg = next((a.value for a in node.arguments or () if a.name.value == "first"), None)
        if isinstance(arg, IntValueNode):
            return int(arg.value)
        if isinstance(arg, VariableNode):
            name = arg.name.value
            value = self.variables.get(name, self.defaults.get(name, DEFAULT_FIRST))
            # Not a whole number: execution refuses the variable before anything is read.
            return value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_FIRST
        return DEFAULT_FIRST


_INTROSPECTION_LISTS = frozenset(
    {"types", "fields", "args", "inputFields", "interfaces", "possibleTypes", "enumValues", "directives"}
)


def measure(document: DocumentNode, variables: Mapping[str, Any] | None, operation: str | None) -> Measure:
    """The largest depth and cost of the document's operations (the one named, when named)."""
    worst = ZERO
    for op in document.definitions:
        if not isinstance(op, OperationDefinitionNode):
            continue
        if operation is not None and (op.name is None or op.name.value != operation):
            continue
        defaults = {
            v.variable.name.value: int(v.default_value.value)
            for v in op.variable_definitions or ()
            if isinstance(v.default_value, IntValueNode)
        }
        m = _Walk(document, variables or {}, defaults).selections(op.selection_set)
        worst = Measure(max(worst.depth, m.depth), max(worst.cost, m.cost))
    return worst


def refusal(m: Measure) -> GraphQLError | None:
    if m.depth > MAX_DEPTH:
        return GraphQLError(
            f"the query is {m.depth} levels deep; at most {MAX_DEPTH} are allowed",
            extensions={"code": "query_too_deep", "details": {"depth": m.depth, "max_depth": MAX_DEPTH}},
        )
    if m.cost > MAX_COST:
        shown = m.cost if m.cost < 10 * MAX_COST else f"more than {10 * MAX_COST}"
        return GraphQLError(
            f"the query would cost {shown}; at most {MAX_COST} is allowed: ask for fewer sessions "
            "(`first`) or fewer fields of the lists inside a page",
            extensions={"code": "query_too_costly", "details": {"max_cost": MAX_COST}},
        )
    return None


class QueryLimits(SchemaExtension):
    """Refuses, before execution, an operation too deep or too costly (variables known by then)."""

    def on_operation(self) -> Iterator[None]:
        self.execution_context.parse_options["max_tokens"] = MAX_TOKENS
        yield

    def on_execute(self) -> Iterator[None]:
        ctx = self.execution_context
        document = ctx.graphql_document
        if document is not None and ctx.result is None:
            refused = refusal(measure(document, ctx.variables, ctx.operation_name))
            if refused is not None:
                # A result set before execution is the one returned: nothing of the query runs.
                ctx.result = ExecutionResult(data=None, errors=[refused])
        yield
