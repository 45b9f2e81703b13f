"""Single-session creates that arrive together are written together (group commit).

A busy manager spends most of a create on what every transaction costs whatever it holds: taking
the writer, the INSERT statements, the commit.  Requests that wait while one create is written are
written next in one transaction, each still checked alone: one caller's refused request is that
caller's error only, and any other failure of the shared transaction sends each request through
its own transaction, as if it had come alone."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from corral.domain.spec import SessionSpec
from corral.services import sessions as session_service
from corral.services.errors import CorralError
from corral.store import sessions
from corral.store.auth import Principal
from corral.store.db import transaction
from corral.store.records import NewSession, SessionRecord

Made = tuple[SessionRecord, bool]


@dataclass(frozen=True)
class Ask:
    """One POST /sessions of a single session, as validated."""

    who: Principal
    """The caller."""
    spec: SessionSpec
    """What it asked for."""
    retry_fields: Mapping[str, Any] | None
    """The inline retry-policy fields it set."""
    priority: int | None
    """The priority it asked for (None: none)."""


@dataclass(eq=False)
class _Waiting:
    ask: Ask
    made: asyncio.Future[Made] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    task: asyncio.Task[Any] | None = field(default_factory=asyncio.current_task)

    def wanted(self) -> bool:
        """Not answered yet, and its request not being cancelled (it is then not written)."""
        return not self.made.done() and not (self.task is not None and self.task.cancelling())


class _Together(Exception):
    """Two asks of one batch share a creation_id: only one at a time can tell them apart."""


class Intake:
    """The manager's one door for single-session creates."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._lock = asyncio.Lock()
        self._waiting: list[_Waiting] = []

    async def create(self, ask: Ask) -> Made:
        """The session and whether it was made now (False: the caller's earlier identical request
        with this creation_id), as services.sessions.create answers."""
        me = _Waiting(ask)
        self._waiting.append(me)
        try:
            # Whoever holds the lock writes everything waiting; a request whose turn comes after
            # its session was written in another's batch only reads its answer.
            async with self._lock:
                if not me.made.done():
                    if len(self._waiting) == 1:
                        # One loop turn for the requests read with this one to queue behind it.
                        await asyncio.sleep(0)
                    batch = [w for w in self._waiting if w.wanted()]
                    self._waiting = []
                    await self._write(batch, me)
        except BaseException:
            if me in self._waiting:
                self._waiting.remove(me)
            # Answered in another's batch after this request gave up: nobody reads it.
            me.made.add_done_callback(_forget)
            raise
        return me.made.result()

    async def _write(self, batch: list[_Waiting], me: _Waiting) -> None:
        try:
            if len(batch) > 1:
                try:
                    answers = await _together(self._engine, [w.ask for w in batch])
                except Exception:  # _Together too: each request then goes alone
                    pass
                else:
                    for waiting, answer in zip(batch, answers, strict=True):
                        _answer(waiting, answer)
                    return
            for waiting in batch:
                await self._alone(waiting)
        except BaseException:
            # Cancelled while writing (this request's client left, the manager stops): the others
            # wait for the next holder of the lock, this one's own request is dropped.
            self._waiting[:0] = [w for w in batch if w.wanted() and w is not me]
            raise

    async def _alone(self, waiting: _Waiting) -> None:
        ask = waiting.ask
        try:
            made = await session_service.create(
                self._engine, ask.who, ask.spec, ask.retry_fields, ask.priority
            )
        except Exception as exc:
            waiting.made.set_exception(exc)
        else:
            waiting.made.set_result(made)


def _answer(waiting: _Waiting, answer: Made | CorralError) -> None:
    if isinstance(answer, CorralError):
        waiting.made.set_exception(answer)
    else:
        waiting.made.set_result(answer)


def _forget(made: asyncio.Future[Made]) -> None:
    if not made.cancelled():
        made.exception()


async def _together(engine: AsyncEngine, asks: Sequence[Ask]) -> list[Made | CorralError]:
    """Every ask in one transaction: each one's session, its earlier one, or its own refusal."""
    keys = [(a.who.name, a.spec.creation_id) for a in asks if a.spec.creation_id]
    if len(set(keys)) < len(keys):
        raise _Together
    now = datetime.now(UTC)
    answers: list[Made | CorralError | None] = []
    news: list[NewSession] = []
    async with transaction(engine) as conn:
        shared = session_service.Shared()
        for ask in asks:
            try:
                admitted = await session_service.admit(
                    conn, ask.who, ask.spec, ask.retry_fields, ask.priority, shared
                )
            except CorralError as exc:
                answers.append(exc)
                continue
            if isinstance(admitted, NewSession):
                news.append(admitted)
                answers.append(None)
            else:
                answers.append((admitted, False))
        made = iter(await sessions.insert_sessions(conn, news, now))
    return [answer if answer is not None else (next(made), True) for answer in answers]
