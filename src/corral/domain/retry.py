"""Whether a failed attempt comes back, when, and why (DESIGN §5): pure, the clock passed in."""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from corral.domain.cause import NEVER_RETRIABLE, Cause
from corral.domain.policy import Condition, DefaultAction, FailureFacts, NamedPolicy, RuleAction, first_match
from corral.domain.spec import AntiAffinity, Backoff, Jitter, RetryPolicy, SessionType

# Free retries (ignore rules, preemption) spend no budget; this bounds a chain that loops on one.
FREE_CEILING = 1000


class Verdict(StrEnum):
    RETRY = "retry"
    FAIL = "fail"
    EXHAUSTED = "exhausted"


@dataclass(frozen=True)
class ClusterRetry:
    """The cluster's retry settings (runtime-changeable, shared by all managers)."""

    enabled: bool = True
    """Kill switch: false decides every failure `fail`."""
    global_max_retries: int = 20
    """Cap on budget-consuming retries of one chain; 0 also stops every retry."""
    dispatch_rate: float | None = None
    """Storm guard: children created per second, cluster-wide (None: no limit)."""


@dataclass(frozen=True)
class Chain:
    """Where the failed attempt stands in its chain."""

    root_session_id: str
    """The chain's first attempt (seeds deterministic jitter)."""
    retry_count: int
    """Budget-consuming retries of the inline policy so far (0 after a manual retry)."""
    total_retries: int
    """Budget-consuming retries of the chain, all policies (the global cap counts these)."""
    rule_counts: Mapping[str, int] = field(default_factory=dict)
    """Retries counted per named rule (and per policy default) so far."""
    first_started_at: datetime | None = None
    """When the chain's first attempt started (the time budget counts from it)."""
    free_requeues: int = 0
    """Retries so far that spent no budget."""


@dataclass(frozen=True)
class Decision:
    """The engine's answer for one failed attempt."""

    verdict: Verdict
    """retry, fail or exhausted."""
    reason: str
    """Why, in words (stored on the attempt and in its history)."""
    policy: str = "inline"
    """Which policy decided: inline, a named policy, or cluster."""
    counted: bool = True
    """Whether a retry spends budget (free requeues do not)."""
    counter: str | None = None
    """The named counter a retry increments (None: the inline budget)."""
    delay: float = 0.0
    """Seconds before the child may start."""
    avoid_agent: str | None = None
    """The agent the child should avoid (soft anti-affinity)."""
    remaining: int | None = None
    """Counted retries left after this one under the limit that decided it (None: free)."""


def attempt_name(name: str, attempt: int) -> str:
    """NAME-retry-N for the N-th retry of a chain (the first attempt keeps NAME)."""
    return f"{re.sub(r'-retry-[0-9]+$', '', name)}-retry-{attempt - 1}"


RETRY_KEY_MARK = ":retry:"


def attempt_creation_id(creation_id: str | None, root_session_id: str, attempt: int) -> str:
    """The child's idempotency key: unique per chain position, so no position is filled twice
    (users cannot choose keys holding the mark, so theirs never collide with it)."""
    return f"{creation_id or root_session_id}{RETRY_KEY_MARK}{attempt - 1}"


def inline_delay(
    policy: RetryPolicy, n: int, root_session_id: str, rng: random.Random | None = None
) -> float:
    """The delay before the child with retry_count `n` (n >= 1), DESIGN §5 formula."""
    if policy.backoff is Backoff.FIXED:
        base = policy.retry_delay
    else:
        try:
            base = min(policy.retry_delay * policy.backoff_multiplier ** (n - 1), policy.max_retry_delay)
        except OverflowError:
            base = policy.max_retry_delay
    if policy.jitter is Jitter.DETERMINISTIC:
        digest = hashlib.sha1(f"{root_session_id}:{n}".encode()).digest()
        h = int.from_bytes(digest[:8], "big")
        base = base + base * policy.jitter_ratio * h / 2**64
    elif policy.jitter is Jitter.RANDOM:
        base = base + base * policy.jitter_ratio * (rng or random.Random()).random()
    return min(base, policy.max_retry_delay)


def _fail(reason: str, policy: str = "inline") -> Decision:
    return Decision(Verdict.FAIL, reason, policy, counted=False)


def decide(
    *,
    session_type: SessionType,
    facts: FailureFacts,
    inline: RetryPolicy | None,
    named: Sequence[NamedPolicy],
    cluster: ClusterRetry,
    chain: Chain,
    now: datetime,
    rng: random.Random | None = None,
) -> Decision:
    """DESIGN §5 evaluation order, steps 1-5."""
    cause = Cause(facts.cause)
    if cause in NEVER_RETRIABLE:
        return _fail(f"{cause} is never retried")
    if session_type is not SessionType.BATCH:
        return _fail(f"{session_type} sessions are not retried")
    if not cluster.enabled or cluster.global_max_retries <= 0:
        return _fail("retries are disabled on this cluster", "cluster")
    inline = inline or RetryPolicy()
    decision = _by_rules(facts, named, cluster, chain, inline, rng)
    if decision is None:
        decision = _by_inline(cause, facts, inline, chain, rng)
    if decision.verdict is Verdict.RETRY and not decision.counted and chain.free_requeues >= FREE_CEILING:
        return Decision(
            Verdict.EXHAUSTED,
            f"{decision.reason}; but the chain has had {FREE_CEILING} free retries",
            decision.policy,
            counted=False,
        )
    if (
        decision.verdict is Verdict.RETRY
        and decision.counted
        and chain.total_retries >= cluster.global_max_retries
    ):
        return Decision(
            Verdict.EXHAUSTED,
            f"not retried: the chain used all {cluster.global_max_retries} retries the cluster allows"
            " (global_max_retries)",
            "cluster",
            counted=False,
        )
    if decision.remaining is not None:
        decision = replace(
            decision, remaining=min(decision.remaining, cluster.global_max_retries - chain.total_retries - 1)
        )
    if decision.verdict is Verdict.RETRY and inline.max_retry_duration is not None:
        if chain.first_started_at is not None:
            budget_end = chain.first_started_at + timedelta(seconds=inline.max_retry_duration)
            if now + timedelta(seconds=decision.delay) > budget_end:
                return Decision(
                    Verdict.EXHAUSTED,
                    f"{decision.reason}; but the next attempt would start past max_retry_duration"
                    f" ({inline.max_retry_duration:g} s from the first start)",
                    decision.policy,
                    counted=False,
                )
    return decision


def _with_delay(
    decision: Decision, seconds: float, ceiling: float, avoid: AntiAffinity, facts: FailureFacts
) -> Decision:
    delay = max(0.0, min(seconds, ceiling))
    return replace(
        decision,
        reason=f"{decision.reason}, {_when(delay)}",
        delay=delay,
        avoid_agent=facts.agent_id if avoid is AntiAffinity.NODE else None,
    )


def _when(delay: float) -> str:
    return f"retrying in {delay:.1f} s" if delay else "retrying at once"


def held(decision: Decision, delay: float, rate: float) -> Decision:
    """The retry as the storm guard lets it start, `delay` seconds from now (at most `rate` retries
    a second cluster-wide): its reason says when, and why then."""
    if delay <= decision.delay:
        return decision
    reason = decision.reason.removesuffix(f", {_when(decision.delay)}")
    return replace(
        decision,
        reason=f"{reason}, {_when(delay)} (held by the cluster's dispatch_rate of {rate:g}/s)",
        delay=delay,
    )


def _by_rules(
    facts: FailureFacts,
    named: Sequence[NamedPolicy],
    cluster: ClusterRetry,
    chain: Chain,
    inline: RetryPolicy,
    rng: random.Random | None,
) -> Decision | None:
    preempted = Cause(facts.cause) is Cause.PREEMPTED
    # A preemption is free unless a rule names it: a catch-all rule is not a word about it.
    hit = first_match(named, facts, (lambda r: Condition.PREEMPTED in r.on_conditions) if preempted else None)
    if hit is not None:
        where = f"policy {hit.policy.name} rule {hit.index + 1}"
        rule = hit.rule
        avoid = rule.anti_affinity or hit.policy.anti_affinity
        if rule.action is RuleAction.FAIL:
            return _fail(f"{where} says fail", hit.policy.name)
        if rule.action is RuleAction.IGNORE:
            d = Decision(
                Verdict.RETRY, f"{where} says retry without counting", hit.policy.name, counted=False
            )
            return _with_delay(d, 0.0, inline.max_retry_delay, avoid, facts)
        limit = rule.retry_limit if rule.retry_limit is not None else hit.policy.retry_limit
        limit = cluster.global_max_retries if limit is None else limit
        used = chain.rule_counts.get(hit.key, 0)
        if used >= limit:
            return Decision(
                Verdict.EXHAUSTED, f"{where}: its {limit} retries are used", hit.policy.name, counted=False
            )
        backoff = rule.backoff or hit.policy.backoff
        d = Decision(
            Verdict.RETRY,
            f"{where} retries ({used + 1} of {limit})",
            hit.policy.name,
            counter=hit.key,
            remaining=limit - used - 1,
        )
        return _with_delay(d, backoff.delay(used + 1), inline.max_retry_delay, avoid, facts)
    if preempted:
        # Preemption is not the job's fault: a free requeue unless a rule says otherwise.
        d = Decision(Verdict.RETRY, "preempted: requeued without counting", "cluster", counted=False)
        return _with_delay(d, 0.0, inline.max_retry_delay, AntiAffinity.NONE, facts)
    for policy in named:
        if policy.default_action is DefaultAction.RETRY:
            key = f"{policy.name}#default"
            limit = cluster.global_max_retries if policy.retry_limit is None else policy.retry_limit
            used = chain.rule_counts.get(key, 0)
            where = f"no rule matched; policy {policy.name} defaults to retry"
            if used >= limit:
                return Decision(
                    Verdict.EXHAUSTED, f"{where}: its {limit} retries are used", policy.name, counted=False
                )
            d = Decision(
                Verdict.RETRY,
                f"{where} ({used + 1} of {limit})",
                policy.name,
                counter=key,
                remaining=limit - used - 1,
            )
            return _with_delay(
                d, policy.backoff.delay(used + 1), inline.max_retry_delay, policy.anti_affinity, facts
            )
    return None


def _by_inline(
    cause: Cause, facts: FailureFacts, inline: RetryPolicy, chain: Chain, rng: random.Random | None
) -> Decision:
    if inline.max_retries <= 0:
        return _fail("no retries asked for (max_retries 0)")
    if facts.recoverable is False:
        return _fail("the root-cause worker marked its error not recoverable")
    if facts.recoverable is not True and cause not in inline.eligible_causes:
        return _fail(f"{cause} is not in the policy's retry causes")
    if chain.retry_count >= inline.max_retries:
        return Decision(
            Verdict.EXHAUSTED, f"{cause}: all {inline.max_retries} retries are used", counted=False
        )
    n = chain.retry_count + 1
    why = "recoverable error" if facts.recoverable is True and cause not in inline.eligible_causes else cause
    d = Decision(Verdict.RETRY, f"{why}: retry {n} of {inline.max_retries}", remaining=inline.max_retries - n)
    return _with_delay(
        d,
        inline_delay(inline, n, chain.root_session_id, rng),
        inline.max_retry_delay,
        inline.anti_affinity,
        facts,
    )


@dataclass(frozen=True)
class AttemptBrief:
    """One attempt of a chain, as much as its retry state needs."""

    attempt: int
    """Position in the chain."""
    status: str
    """Its session status."""
    result: str
    """success, failure or undefined."""
    retry_state: str | None
    """The engine's decision on it (None: not ended or not decided yet)."""


_LIVE_SHOWN = {"PENDING": "scheduled"}
_ENDED = {"TERMINATED", "ERROR", "CANCELLED"}


def shown_retry_state(me: AttemptBrief, chain: Sequence[AttemptBrief]) -> str:
    """none|scheduled|running|exhausted|succeeded|failed: a retried attempt shows how its chain
    stands now (from the latest attempt); the latest shows its own decision."""
    latest = max(chain, key=lambda a: a.attempt, default=me)
    if latest.attempt <= me.attempt:
        return me.retry_state if me.retry_state in ("exhausted", "failed", "succeeded") else "none"
    if latest.status not in _ENDED:
        return _LIVE_SHOWN.get(latest.status, "running")
    if latest.result == "success":
        return "succeeded"
    if latest.retry_state in ("exhausted", "failed"):
        return latest.retry_state
    return "running" if latest.retry_state is None else "failed"
