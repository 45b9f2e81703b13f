"""The retry engine: decides every ended attempt once, from the durable events table (DESIGN §5)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import structlog

from corral import metrics
from corral.clock import utcnow
from corral.domain.cause import Cause, TerminationReason
from corral.domain.cluster import ClusterSettings
from corral.domain.events import START, Position
from corral.domain.history import HistoryRow
from corral.domain.policy import PolicyError
from corral.domain.records import NewSession, SessionRecord
from corral.domain.retry import Chain, Decision, Verdict, attempt_creation_id, attempt_name, decide, held
from corral.domain.status import SessionResult, SessionStatus
from corral.manager.retry_facts import failure_facts, named_policies
from corral.store import config, journal, outbox, retries
from corral.store import sessions as session_store
from corral.store.db import reading, transaction
from corral.store.retries import Claim
from corral.store.unit import Engine, Tx
from corral.wakeup import Wakeup, repeat

log = structlog.get_logger("corral.retry")

CONSUMER = "retry-engine"
# Ended attempts still undecided are looked for every this many graces (see run_once).
BACKSTOP_GRACES = 3
MAX_DECISION_ERRORS = 3
HANDLER = "RetryEngine"
# Test hook (never set in production): die between inserting a child and committing it.
CRASH_HOOK = "CORRAL_TEST_CRASH_BEFORE_RETRY_COMMIT"


Outcome = Claim | bool  # True: decided now


class RetryEngine:
    """Reads terminal-status events after its stored cursor and decides each attempt exactly once."""

    def __init__(
        self,
        engine: Engine,
        wakeup: Wakeup,
        clock: Callable[[], datetime] = utcnow,
        batch: int = 1000,
        poll: float = 1.0,
        grace: float = 10.0,
    ) -> None:
        self._engine = engine
        self._wakeup = wakeup
        self._clock = clock
        self._batch = batch
        """Events read a run, of every kind: a session's life writes about eight, so 200 was 25 ends
        a run, and a busy cycle's ends took several runs of a round trip or two each."""
        self._poll = poll
        self._rng = random.Random()
        self._errors: dict[str, int] = {}
        self._grace = timedelta(seconds=grace)
        self._position: Position | None = None
        self._backstop_at = 0.0
        self._saved_at = 0.0
        self._cursor_read_at = 0.0
        self._durable = START
        """The stored position, as last read (at `_cursor_read_at`)."""
        self._behind = False
        """The last run read a full batch: more events wait to be read now."""
        self._again: set[str] = set()
        """Ends whose row another transaction held when claimed: tried again in the next run."""

    async def run(self) -> None:
        await repeat(self._step, lambda: self._wakeup.wait_retries(self._poll), "retry cycle failed")

    async def _step(self) -> bool:
        """A run, then at once another only if events were left unread.  A run that decided some
        and read all there was need not look again: a later end wakes the engine (on_ended), and
        under load every cycle ending sessions was followed by an empty run (a third of the
        engine's time)."""
        await self.run_once()
        return self._behind

    async def run_once(self) -> bool:
        """One batch of events (and now and then the backstop); True when something was decided."""
        self._behind = False
        async with reading(self._engine) as conn:
            if self._position is None or time.monotonic() - self._cursor_read_at >= 1.0:
                # Another manager's engine may be ahead: its stored position is looked at now and
                # then (each run, it was a round trip for every batch of ended sessions).
                self._cursor_read_at = time.monotonic()
                self._durable = await outbox.cursor(conn, CONSUMER)
            durable = self._durable
            if self._position is None or self._position < durable:
                self._position = durable
            rows = await retries.since(conn, self._position, self._batch)
        now = self._clock()
        ids = [sid for _, sid in rows if sid is not None]
        backstop_at = self._backstop_at
        if time.monotonic() - self._backstop_at >= BACKSTOP_GRACES * self._grace.total_seconds():
            # Events are read in commit order, so none is passed over; an attempt whose decision
            # failed, or a manager that died between reading and deciding, leaves one undecided
            # behind the position: those still undecided after the grace are taken here.
            self._backstop_at = time.monotonic()
            async with reading(self._engine) as conn:
                ids += await retries.undecided(conn, now - self._grace, self._batch)
        # A claim skips a row another transaction holds (an agent storing the attempt's last
        # output, often in the very moment it ends): tried again next round, not left to the
        # backstop's grace.  Another manager deciding it is found decided on the next try.
        ids += sorted(self._again)
        self._again = set()
        pending = list(dict.fromkeys(ids))
        decided = 0
        if pending:
            async with transaction(self._engine) as conn:
                plain = await retries.settle_first_successes(conn, pending)
            decided = len(plain)
            pending = [sid for sid in pending if sid not in plain]
        if pending:
            # Read only when some attempt needs deciding: most ends are first successes.
            async with reading(self._engine) as conn:
                # Decided already (by another manager, or before a restart: events are read again
                # after one) costs one read here, not a write transaction each to find it out.
                undecided = await retries.still_undecided(conn, pending)
                pending = [sid for sid in pending if sid in undecided]
                try:
                    settings = await config.cluster_settings(conn)
                except PolicyError as exc:
                    log.error("cluster config unusable; retries wait", field=exc.field, error=str(exc))
                    self._backstop_at = backstop_at  # what it found is looked for again next time
                    return False
        for session_id in pending:
            try:
                outcome = await self._decide_one(session_id, settings)
                if outcome is Claim.BUSY:
                    self._again.add(session_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                outcome = await self._failed_to_decide(session_id, exc)
            if outcome is True:
                decided += 1
                self._wakeup.scheduler()  # a child may wait in the queue: place it now
            elif outcome is Claim.DECIDED:
                metrics.RETRY_ALREADY_DECIDED.inc()
            # BUSY after a failure: the backstop looks again.
        before = self._position
        if rows:
            self._position = rows[-1][0]  # past every event read, other kinds included
        if self._position > durable and time.monotonic() - self._saved_at >= 1.0:
            # At most once a second: a restart reads again what came after, and finds it decided.
            self._saved_at = time.monotonic()
            async with transaction(self._engine) as conn:
                await outbox.advance(conn, CONSUMER, self._position, now)
        self._behind = len(rows) == self._batch and self._position > before
        return bool(decided) or self._behind

    async def _failed_to_decide(self, session_id: str, exc: Exception) -> Outcome:
        """One attempt that cannot be decided never stops the others: it is left to the backstop to
        try again, and after a few failures it is decided "no retry", saying why."""
        log.exception("retry decision failed", session_id=session_id)
        tries = self._errors.get(session_id, 0) + 1
        self._errors[session_id] = tries
        if tries < MAX_DECISION_ERRORS:
            return Claim.BUSY
        self._errors.pop(session_id, None)
        reason = f"the retry engine could not decide ({type(exc).__name__}; see the manager log)"
        now = self._clock()
        async with transaction(self._engine) as conn:
            if await retries.stop_undecided(conn, session_id, reason):
                await journal.add_history(
                    conn, [HistoryRow(session_id, HANDLER, "FAIL", "ERROR", None, reason)], now
                )
        return True

    async def _decide_one(self, session_id: str, settings: ClusterSettings) -> Outcome:
        async with transaction(self._engine) as conn:
            got = await retries.claim(conn, session_id)
            if isinstance(got, Claim):
                return got
            s = got
            now = self._clock()
            if s.status is SessionStatus.TERMINATED and s.result is SessionResult.SUCCESS:
                await self._succeeded(conn, s, now)
                return True
            named, missing = await named_policies(conn, s, settings)
            facts = await failure_facts(conn, s, settings)
            if s.termination_reason == TerminationReason.USER_CANCELLED:
                # Cancelled while it was failing: the user's word wins over the kernel's cause.
                facts = replace(facts, cause=str(Cause.USER_CANCELLED))
            d = decide(
                session_type=s.spec.type,
                facts=facts,
                inline=s.spec.retry_policy,
                named=named,
                cluster=settings.retry,
                chain=Chain(
                    s.root_session_id,
                    s.retry_count,
                    s.total_retries,
                    s.rule_counts,
                    s.first_started_at or s.started_at or s.chain_submitted_at,
                    s.free_requeues,
                ),
                now=now,
                rng=self._rng,
            )
            if missing:
                d = replace(d, reason=f"{d.reason} (named policies not applied: {', '.join(missing)})")
            metrics.RETRY_DECISIONS.labels(policy=d.policy, decision=str(d.verdict)).inc()
            cause = str(s.cause or Cause.UNKNOWN)
            if d.verdict is Verdict.RETRY:
                start = now + timedelta(seconds=d.delay)
                if settings.retry.dispatch_rate:
                    start = await retries.take_dispatch_slot(conn, settings.retry.dispatch_rate, start, now)
                    d = held(d, (start - now).total_seconds(), settings.retry.dispatch_rate)
                await self._retry(conn, s, d, cause, now, start)
            elif d.verdict is Verdict.EXHAUSTED:
                await retries.decide(conn, s.id, "exhausted", d.reason)
                await self._say(conn, s, "session.retry_exhausted", {"cause": cause, "reason": d.reason}, now)
                await journal.add_history(
                    conn, [HistoryRow(s.id, HANDLER, "EXHAUSTED", s.status, None, d.reason)], now
                )
                metrics.RETRY_EXHAUSTED.labels(cause=cause).inc()
            else:
                asked = s.spec.max_retries > 0 or bool(named)
                await retries.decide(conn, s.id, "failed" if asked else "none", d.reason)
                if asked:
                    await journal.add_history(
                        conn, [HistoryRow(s.id, HANDLER, "FAIL", s.status, None, d.reason)], now
                    )
            return True

    async def _retry(
        self, conn: Tx, s: SessionRecord, d: Decision, cause: str, now: datetime, start: datetime
    ) -> None:
        counts = dict(s.rule_counts)
        if d.counter is not None:
            counts[d.counter] = counts.get(d.counter, 0) + 1
        attempt = s.attempt + 1
        child_id = str(uuid.uuid4())
        spec = replace(
            s.spec, creation_id=attempt_creation_id(s.spec.creation_id, s.root_session_id, attempt)
        )
        # "attempt N of M": what the deciding limit still allows, or one more for a free retry.
        planned = attempt + d.remaining if d.counted and d.remaining is not None else s.max_attempts + 1
        child = NewSession(
            id=child_id,
            name=attempt_name(s.name, attempt),
            owner=s.owner,
            spec=spec,
            parent_session_id=s.id,
            root_session_id=s.root_session_id,
            retry_count=s.retry_count + (1 if d.counted else 0),
            chain_submitted_at=s.chain_submitted_at,
            retry_after=start if start > now else None,
            attempt=attempt,
            total_retries=s.total_retries + (1 if d.counted else 0),
            free_requeues=s.free_requeues + (0 if d.counted else 1),
            rule_counts=counts,
            first_started_at=s.first_started_at or s.started_at,
            retry_cause=cause,
            avoid_agent=d.avoid_agent,
            planned_attempts=planned,
        )
        await session_store.insert_session(conn, child, now)
        if os.environ.get(CRASH_HOOK) == "1":
            os.kill(os.getpid(), signal.SIGKILL)  # the transaction dies uncommitted with us
        await retries.decide(conn, s.id, "scheduled", d.reason, child_id)
        of = planned
        payload = {
            "cause": cause,
            "attempt": attempt,
            "max_attempts": of,
            "child_id": child_id,
            "delay": round((start - now).total_seconds(), 3),
            "reason": d.reason,
            "exit_code": s.exit_code,
        }
        await self._say(conn, s, "session.retry_scheduled", payload, now)
        await journal.add_history(
            conn,
            [HistoryRow(s.id, HANDLER, "RETRY", s.status, None, f"{d.reason}; next attempt {child_id}")],
            now,
        )
        await config.audit(
            conn, "retry-engine", "retry.auto", child_id, f"auto, {cause}, attempt {attempt} of {of}", now
        )
        metrics.RETRY_SCHEDULED.labels(cause=cause).inc()

    async def _succeeded(self, conn: Tx, s: SessionRecord, now: datetime) -> None:
        retried = s.attempt > 1
        await retries.decide(conn, s.id, "succeeded" if retried else "none", "succeeded")
        if retried:
            await self._say(conn, s, "session.retry_succeeded", {"attempt": s.attempt}, now)
            metrics.RETRY_SUCCEEDED.inc()

    async def _say(
        self, conn: Tx, s: SessionRecord, kind: str, payload: dict[str, Any], now: datetime
    ) -> None:
        if s.spec.retry_policy is not None and not s.spec.retry_policy.emit_retry_events:
            return  # the user asked for quiet; the counters still count
        await journal.add_events(
            conn, [journal.session_event(s.id, s.spec.project, kind, payload=payload)], now
        )
