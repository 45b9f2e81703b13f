"""What every resolver of a request reads: the caller, the read engine, and the request's loaders."""

from __future__ import annotations

from strawberry.fastapi import BaseContext

from corral.api.graphql.loaders import Loaders
from corral.api.state import AppState, Caller, State
from corral.domain.records import Principal


class Context(BaseContext):
    def __init__(self, state: AppState, who: Principal) -> None:
        super().__init__()
        self.state = state
        self.who = who
        self.reader = state.reader
        self.loaders = Loaders(state.reader, who)


async def context(who: Caller, state: State) -> Context:
    """The caller comes from the same dependency as every REST route's: a request without a known
    key is answered 401 before its query is even parsed."""
    return Context(state, who)
