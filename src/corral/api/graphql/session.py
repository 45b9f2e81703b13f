"""A session in GraphQL: the fields of REST's SessionOut (the same values, built by the same code),
plus the links REST gives as separate routes (parent, attempts, history) read through loaders."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

import strawberry
from strawberry.scalars import JSON

from corral.api.graphql.context import Context
from corral.api.graphql.types import ErrorRecord, HistoryEntry, Kernel, RootCause, copied, resolver
from corral.api.schemas import HistoryOut, SessionOut, errors_of
from corral.domain.records import SessionRecord
from corral.domain.status import SessionStatus

Info = strawberry.Info[Context, None]


@strawberry.type(description="A session: one attempt of its retry chain, as GET /api/v1/sessions/{id}.")
class Session:
    record: strawberry.Private[SessionRecord]

    id: strawberry.ID = strawberry.field(description="the session's UUID")
    name: str
    type: str
    status: SessionStatus
    result: str
    cause: str | None
    exit_code: int | None
    priority: int
    resource_group: str
    project: str
    owner: str
    cluster_size: int
    resources: JSON
    command: list[str]
    created_at: datetime
    started_at: datetime | None
    terminated_at: datetime | None
    parent_session_id: strawberry.ID | None
    root_session_id: strawberry.ID
    attempt: int = strawberry.field(description="position in the retry chain, 1-based")
    max_attempts: int = strawberry.field(description="max_retries + 1 + free requeues so far")
    retry_count: int
    max_retries: int
    retry_policy: JSON | None = strawberry.field(description="the inline retry policy, as submitted")
    retry_policies: list[str]
    retry_cause: str | None = strawberry.field(description="the cause that made this attempt")
    retry_state: str = strawberry.field(description="none|scheduled|running|exhausted|succeeded|failed")
    retry_reason: str | None
    next_attempt_id: strawberry.ID | None
    retry_after: datetime | None
    retry_chain: list[strawberry.ID] = strawberry.field(
        description="ids of every attempt of the chain, first to last"
    )
    resume_count: int
    array_id: str | None
    array_index: int | None
    manual_retry: bool
    creation_id: str | None
    termination_reason: str | None
    error_strategy: str
    root_cause: RootCause | None = strawberry.field(description="the worker that failed first")
    kernels: list[Kernel]
    errors: list[ErrorRecord] = strawberry.field(
        description="every failed worker's error record, the root cause first"
    )

    @classmethod
    def of(cls, s: SessionRecord, out: SessionOut) -> Session:
        return copied(
            cls,
            out,
            record=s,
            status=SessionStatus(out.status),
            root_cause=RootCause.of(out.root_cause),
            kernels=[Kernel.of(k) for k in out.kernels],
            errors=[ErrorRecord.of(e) for e in errors_of(s)],
        )

    @resolver("the attempt this one retried (null for a first attempt)")
    async def parent_session(self, info: Info) -> Session | None:
        if self.record.parent_session_id is None:
            return None
        parent = await info.context.loaders.sessions.load(self.record.parent_session_id)
        return None if parent is None else (await sessions_of(info.context, [parent]))[0]

    @resolver("every attempt of its retry chain, first to last (itself included)")
    async def attempts(self, info: Info) -> list[Session]:
        chain = await info.context.loaders.attempts.load(self.record.root_session_id)
        return await sessions_of(info.context, chain)

    @resolver("what the coordinator decided for it, oldest first")
    async def history(self, info: Info) -> list[HistoryEntry]:
        rows = await info.context.loaders.histories.load(self.record)
        return [HistoryEntry.of(HistoryOut.of(h)) for h in rows]


async def sessions_of(ctx: Context, records: Sequence[SessionRecord]) -> list[Session]:
    """The sessions as GraphQL shows them, their chains read in one batch with the request's others."""
    chains = await asyncio.gather(*(ctx.loaders.chain(s) for s in records))
    return [Session.of(s, SessionOut.of(s, chain=c)) for s, c in zip(records, chains, strict=True)]
