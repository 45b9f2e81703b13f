"""Single-session creates that arrive together are written together (group commit).

A busy manager spends most of a create on what every transaction costs whatever it holds: taking
the writer, the INSERT statements, the commit.  Requests that wait while one create is written are
written next in one transaction, each still checked alone: one caller's refused request is that
caller's error only, and any other failure of the shared transaction sends each request through
its own transaction, as if it had come alone."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from corral.clock import utcnow
from corral.domain.records import NewSession, Principal, SessionRecord
from corral.services import admission as session_service
from corral.services import users
from corral.services.arrays import BulkItem
from corral.services.errors import CorralError
from corral.store import auth, sessions
from corral.store.db import transaction
from corral.store.unit import Engine, Tx

Made = tuple[SessionRecord, bool]

BATCH_MOST = 256
"""Requests written in one transaction at most (the rest are the next batch): a transaction and
the requests waiting on it stay short."""


BUSY_GAP = 0.02
"""Seconds since the previous submit under which a submit waits one loop turn for others."""


@dataclass(frozen=True, kw_only=True)
class Ask(BulkItem):
    """One POST /sessions of a single session, as validated: what a bulk item holds, and who sent
    it when."""

    who: Principal
    """The caller, as the request's authentication found it."""
    key: str
    """The API key it authenticated with, checked again as the ask is written (a batch's keys in
    one read): a key revoked since the request arrived is refused (on SQLite up to the write
    itself, on PostgreSQL up to the read just before it, as a lone request's)."""
    arrived: datetime = field(default_factory=utcnow)
    """When it reached the manager: its place in the queue, whoever it was written with."""


@dataclass(eq=False)
class _Waiting:
    ask: Ask
    made: asyncio.Future[Made | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    """Its answer; None: write it alone, as if it had come alone."""
    task: asyncio.Task[Any] | None = field(default_factory=asyncio.current_task)

    def wanted(self) -> bool:
        """Its request is not being cancelled (it is then not written)."""
        return not (self.task is not None and self.task.cancelling())


class _Together(Exception):
    """Two asks of one batch share a caller's creation_id: only one at a time can tell them apart."""


class _AtCommit(Exception):
    """The shared write may have been written (the cause says why): it failed at its commit, or its
    connection was lost while the statement that is its own commit ran."""

    def __init__(self, answers: Sequence[Made | CorralError | None]) -> None:
        super().__init__("the shared write may have been written")
        self.answers = list(answers)
        """Each ask's answer found before the write (a refusal, an earlier session), None for
        those the write was to make."""


class Intake:
    """The manager's one door for single-session creates."""

    def __init__(self, engine: Engine, reader: Engine | None = None, busy_gap: float = BUSY_GAP) -> None:
        self._engine = engine
        self._reader = reader or engine
        self._busy_gap = busy_gap
        self._lock = asyncio.Lock()
        self._waiting: list[_Waiting] = []
        self._writes: set[asyncio.Future[None]] = set()
        self._last = -math.inf

    async def create(self, ask: Ask) -> Made:
        """The session and whether it was made now (False: the caller's earlier identical request
        with this creation_id), as services.sessions.create answers."""
        me = _Waiting(ask)
        self._waiting.append(me)
        # Submits coming close together: others are likely read with this one.  A lone submit
        # does not yield (the loop's other work, a cycle's next step, would run first).
        now = time.monotonic()
        busy, self._last = now - self._last <= self._busy_gap, now
        try:
            # Whoever holds the lock takes everything waiting; a request taken into another's
            # batch waits for that batch's answer.
            async with self._lock:
                if me in self._waiting:
                    if len(self._waiting) == 1 and busy:
                        # One loop turn for the requests read with this one to queue behind it.
                        await asyncio.sleep(0)
                    rest = [w for w in self._waiting if w is not me]
                    taken, self._waiting = [me, *rest[: BATCH_MOST - 1]], rest[BATCH_MOST - 1 :]
                    batch = [w for w in taken if w is me or w.wanted()]
                    for dropped in (w for w in taken if w not in batch):
                        # It raises at its next await; if its cancellation was called off, it
                        # goes alone.
                        dropped.made.set_result(None)
                    # Once taken, a batch is written and answered even if this request gives up
                    # meanwhile: nothing taken is put back, so nothing is written twice.
                    if len(batch) == 1:
                        me.made.set_result(None)  # alone: no batch to write
                    else:
                        write = asyncio.ensure_future(self._write(batch))
                        self._writes.add(write)  # held while it runs, whoever gives up
                        write.add_done_callback(self._writes.discard)
                        await asyncio.shield(write)
            made = await asyncio.shield(me.made)
        except BaseException:
            if me in self._waiting:
                self._waiting.remove(me)
            # Answered after this request gave up: nobody reads it.
            me.made.add_done_callback(_forget)
            raise
        if made is None:
            # Alone: as the request found its caller (the lone create reads the key no later).
            return await session_service.create(
                self._engine, ask.who, ask.spec, ask.retry_fields, ask.priority, ask.arrived
            )
        return made

    async def _write(self, batch: list[_Waiting]) -> None:
        answers: Sequence[Made | BaseException | None] = [None] * len(batch)
        try:
            answers = await _together(self._engine, [w.ask for w in batch])
        except _AtCommit as exc:
            # The commit may have happened: going alone could write each session twice.  Each
            # request it was to make fails as one alone would have; the others keep their answers.
            failure = exc.__cause__ or exc
            answers = [failure if a is None else a for a in exc.answers]
        except Exception:
            # Each request then goes alone, in its own task and transaction, all at once (as
            # without this door): its own error, its own wait for a database that is away.
            pass
        except BaseException:
            # Stopped itself (the loop shutting down): nobody waits for an answer never coming.
            for waiting in batch:
                waiting.made.cancel()
            raise
        for waiting, answer in zip(batch, answers, strict=True):
            if isinstance(answer, BaseException):
                waiting.made.set_exception(answer)
            else:
                waiting.made.set_result(answer)


async def _callers(conn: Tx, asks: Sequence[Ask]) -> list[Principal | None]:
    """Each ask's caller, None where its key has been revoked since: one read for the batch."""
    held = await auth.held_keys(conn, {a.key for a in asks})
    return [a.who if a.key in held else None for a in asks]


def _forget(made: asyncio.Future[Made | None]) -> None:
    if not made.cancelled():
        made.exception()


async def _together(engine: Engine, asks: Sequence[Ask]) -> list[Made | CorralError]:
    """Every ask in one transaction: each one's session, its earlier one, or its own refusal (a key
    revoked since it arrived: 401)."""
    keys = [(a.who.name, a.spec.creation_id) for a in asks if a.spec.creation_id]
    if len(set(keys)) < len(keys):
        raise _Together
    answers: list[Made | CorralError | None] = []
    news: list[NewSession] = []
    committing = False
    try:
        # The keys are read in the transaction that writes (on SQLite, the one holding the writer),
        # so a key revoked while its request waited is refused.
        async with transaction(engine) as conn:
            callers = await _callers(conn, asks)
            shared = session_service.Shared()
            for ask, who in zip(asks, callers, strict=True):
                try:
                    admitted = await session_service.admit(
                        conn, users.known(who), ask.spec, ask.retry_fields, ask.priority, shared, ask.arrived
                    )
                except CorralError as exc:
                    answers.append(exc)
                    continue
                if isinstance(admitted, NewSession):
                    news.append(admitted)
                    answers.append(None)
                else:
                    answers.append((admitted, False))
            written = await sessions.insert_rows(conn, news, utcnow())
            # From here on (the COMMIT) a failure may leave it written.
            committing = True
            made = iter(sessions.records_of(written))
            together = [answer if answer is not None else (next(made), True) for answer in answers]
    except Exception as exc:
        if committing:
            raise _AtCommit(answers) from exc
        raise
    return together
