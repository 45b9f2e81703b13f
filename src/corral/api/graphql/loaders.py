"""A request's data loaders: whatever a page's sessions ask for (their chains, parents, attempts,
histories) is read in one batch per kind, never once per session.  Made per request, so nothing
read for one caller is ever served to another, and a revoked key sees nothing cached."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any

from strawberry.dataloader import DataLoader

from corral.domain.records import HistoryRecord, Principal, SessionRecord
from corral.services import Engine
from corral.services import sessions as svc
from corral.services.errors import NotFound

Chain = list[dict[str, Any]] | None
"""The light rows of a session's retry chain (None for a first attempt nothing followed)."""


class Loaders:
    def __init__(self, reader: Engine, who: Principal) -> None:
        self.reader = reader
        self.who = who
        # One chain per root id: every attempt of a chain shares its rows.
        self.chains: DataLoader[str, Chain] = DataLoader(load_fn=self._chains)
        self._by_root: dict[str, SessionRecord] = {}
        self.sessions: DataLoader[str, SessionRecord | None] = DataLoader(load_fn=self._sessions)
        self.attempts: DataLoader[str, list[SessionRecord]] = DataLoader(load_fn=self._attempts)
        self.histories: DataLoader[SessionRecord, list[HistoryRecord]] = DataLoader(
            load_fn=self._histories, cache_key_fn=lambda s: s.id
        )

    async def one(self, session_id: str) -> SessionRecord | None:
        """The session the caller names (a full id, or the start of one as REST takes), if visible."""
        try:
            found = await svc.get(self.reader, self.who, session_id)
        except NotFound:
            return None
        self.sessions.prime(found.id, found)
        return found

    def chain(self, s: SessionRecord) -> Awaitable[Chain]:
        """The rows of the session's retry chain, read with the request's other chains at once."""
        self._by_root.setdefault(s.root_session_id, s)
        return self.chains.load(s.root_session_id)

    async def _chains(self, roots: list[str]) -> Sequence[Chain]:
        rows = await svc.chain_rows(self.reader, [self._by_root[r] for r in roots])
        return [rows.get(r) for r in roots]

    async def _sessions(self, ids: list[str]) -> Sequence[SessionRecord | None]:
        found = await svc.get_many(self.reader, self.who, ids)
        return [found.get(i) for i in ids]

    async def _attempts(self, roots: list[str]) -> Sequence[list[SessionRecord]]:
        chains = await svc.chains_of(self.reader, self.who, roots)
        for chain in chains.values():
            if chain:
                # Read whole, each chain gives its attempts' chain rows too: no second read.
                self.chains.prime(chain[0].root_session_id, svc.chain_rows_of(chain))
            for s in chain:
                self.sessions.prime(s.id, s)
        return [chains.get(r, []) for r in roots]

    async def _histories(self, records: list[SessionRecord]) -> Sequence[list[HistoryRecord]]:
        found = await svc.histories(self.reader, self.who, records)
        return [found.get(s.id, []) for s in records]
