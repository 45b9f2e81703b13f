"""The tables the pages show that the code enforces: status transitions (domain/transitions.py) and
failure causes (domain/cause.py, domain/spec.py).  Each table row is the code's; only the words
explaining it are written here, and a pair or cause without words (or words for one the code no
longer has) stops the generator, so the page can never show a move the code refuses or miss one it
allows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from corral.domain.cause import NEVER_RETRIABLE, Cause
from corral.domain.spec import DEFAULT_ELIGIBLE
from corral.domain.status import KernelStatus, SessionStatus
from corral.domain.transitions import KERNEL_TRANSITIONS, SESSION_TRANSITIONS

S = SessionStatus
K = KernelStatus
STARTUP = (S.SCHEDULED, S.PREPARING, S.PULLING, S.PREPARED, S.CREATING)
ACTIVE = (*STARTUP, S.RUNNING)

# (sources, targets, when): every pair of sources x targets is one allowed move.
SESSION_ROWS: Sequence[tuple[Sequence[S], Sequence[S], str]] = (
    ((S.PENDING,), (S.SCHEDULED,), "placed: every kernel has an agent; the allocations are written as rows"),
    (
        (S.PENDING,),
        (S.CANCELLED,),
        "cancelled while queued, or queued past the group's `pending_timeout` (cause `scheduler_timeout`)",
    ),
    ((S.SCHEDULED, S.PREPARING), (S.PREPARING,), "prepare orders handed to the agents"),
    ((S.PREPARING,), (S.PULLING,), "an agent is preparing a kernel's runtime environment"),
    ((S.SCHEDULED, S.PREPARING, S.PULLING), (S.PREPARED,), "every kernel is prepared"),
    ((S.PREPARED,), (S.CREATING,), "start orders handed over, or every kernel started by itself"),
    ((S.CREATING,), (S.RUNNING,), "no kernel is still starting"),
    (
        STARTUP,
        (S.PENDING,),
        "a start-up phase timed out: re-queued, allocations released (after `max_reschedules`: "
        "ERROR, `scheduler_timeout`); never while one of its kernels may be running",
    ),
    ((S.SUSPENDED,), (S.PENDING,), "resumed: its turn came and it fits"),
    (
        (S.PENDING, *ACTIVE, S.SUSPENDED),
        (S.TERMINATING,),
        "a kernel failed, or all ended; or a stop was asked: cancel, deadline, preemption, timeout",
    ),
    ((S.TERMINATING,), (S.TERMINATED, S.ERROR), "every kernel has ended: the final status is computed"),
    ((S.TERMINATING,), (S.CANCELLED,), "it was cancelled before any kernel started"),
    ((S.RUNNING, S.TERMINATING), (S.SUSPENDED,), "preempted in suspend mode, once every kernel has stopped"),
)

KERNEL_ROWS: Sequence[tuple[Sequence[K], Sequence[K], str]] = (
    ((K.PENDING,), (K.SCHEDULED,), "placed on an agent"),
    ((K.SCHEDULED,), (K.PREPARING,), "its order was handed to the agent"),
    ((K.PREPARING,), (K.PULLING,), "the agent is preparing its runtime environment"),
    ((K.PREPARING, K.PULLING), (K.PREPARED,), "prepared"),
    ((K.PREPARED,), (K.CREATING,), "its process is being started"),
    ((K.CREATING,), (K.RUNNING,), "its process runs"),
    (
        (K.SCHEDULED, K.PREPARING, K.PULLING, K.PREPARED, K.CREATING),
        (K.PENDING,),
        "its session was re-queued",
    ),
    ((K.SUSPENDED,), (K.PENDING,), "its suspended session was resumed"),
    (
        (K.PENDING, K.SCHEDULED, K.PREPARING, K.PULLING, K.PREPARED, K.CREATING, K.RUNNING, K.SUSPENDED),
        (K.TERMINATING,),
        "asked to stop",
    ),
    (
        tuple(s for s in K if s not in (K.TERMINATED, K.ERROR, K.CANCELLED)),
        (K.TERMINATED, K.ERROR, K.CANCELLED),
        "ended: TERMINATED when it exited 0, ERROR when it failed (a non-zero exit, a kill, its "
        "agent lost), CANCELLED when it never started",
    ),
    ((K.CREATING, K.RUNNING, K.TERMINATING), (K.SUSPENDED,), "stopped for its session's suspension"),
)

CAUSES: dict[Cause, str] = {
    Cause.AGENT_TRANSIENT: "the kernel's agent was lost (past its lease, then the fence)",
    Cause.SCHEDULER_TIMEOUT: "a start-up phase timed out too often, or the session was queued past "
    "`pending_timeout`",
    Cause.IMAGE_PULL_FAILURE: "the kernel's runtime environment could not be prepared",
    Cause.KERNEL_NONZERO_EXIT: "the root-cause kernel exited non-zero (126 or 127: it could not be executed)",
    Cause.OOM_KILLED: "the root-cause kernel was killed for memory (its cgroup's `oom_kill` counter, "
    "or the agent's watchdog)",
    Cause.DEADLINE_EXCEEDED: "the session's `timeout` passed",
    Cause.PREEMPTED: "stopped to make room for a session of higher priority",
    Cause.UNKNOWN: "anything else",
    Cause.USER_CANCELLED: "cancelled by a user",
    Cause.VALIDATION_ERROR: "refused as invalid",
    Cause.QUOTA_EXCEEDED: "reserved (there are no quotas yet)",
}


class Stale(Exception):
    """The code's table and the words here disagree: say which pairs, and where to fix it."""


def _pairs(rows: Iterable[tuple[Sequence[object], Sequence[object], str]]) -> set[tuple[object, object]]:
    return {(a, b) for froms, tos, _ in rows for a in froms for b in tos}


def _check(rows: Sequence[tuple[Sequence[object], Sequence[object], str]], allowed: Iterable[object]) -> None:
    code, docs = set(allowed), _pairs(rows)
    if code != docs:
        missing = sorted(f"{a} -> {b}" for a, b in code - docs)
        extra = sorted(f"{a} -> {b}" for a, b in docs - code)
        raise Stale(
            "the transition table changed: explain it in docs/gen/tables.py"
            + (f"; moves without words: {', '.join(missing)}" if missing else "")
            + (f"; words for moves the code refuses: {', '.join(extra)}" if extra else "")
        )


def _statuses(statuses: Sequence[object]) -> str:
    return ", ".join(f"`{s}`" for s in statuses)


def _table(rows: Sequence[tuple[Sequence[object], Sequence[object], str]]) -> str:
    lines = ["| from | to | when |", "|---|---|---|"]
    lines += [f"| {_statuses(froms)} | {_statuses(tos)} | {when} |" for froms, tos, when in rows]
    return "\n".join(lines) + "\n"


def session_transitions() -> str:
    _check(SESSION_ROWS, SESSION_TRANSITIONS)
    return _table(SESSION_ROWS)


def kernel_transitions() -> str:
    _check(KERNEL_ROWS, KERNEL_TRANSITIONS)
    return _table(KERNEL_ROWS)


def causes() -> str:
    if set(CAUSES) != set(Cause):
        raise Stale(f"the causes changed: explain {sorted(set(Cause) ^ set(CAUSES))} in docs/gen/tables.py")
    lines = ["| cause | when | retried by default |", "|---|---|---|"]
    for cause, when in CAUSES.items():
        if cause in NEVER_RETRIABLE:
            retried = "never"
        elif cause in DEFAULT_ELIGIBLE:
            retried = "yes"
        elif cause is Cause.PREEMPTED:
            retried = "requeued without spending budget"
        else:
            retried = "no"
        lines.append(f"| `{cause}` | {when} | {retried} |")
    return "\n".join(lines) + "\n"
