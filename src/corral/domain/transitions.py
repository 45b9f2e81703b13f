"""The session and kernel transition tables: every pair not listed is refused."""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.status import (
    NON_TERMINAL_KERNEL,
    NON_TERMINAL_SESSION,
    STARTUP_SESSION,
    KernelStatus,
    SessionStatus,
)

S = SessionStatus
K = KernelStatus


def _pairs(froms: frozenset[S] | set[S], tos: frozenset[S] | set[S]) -> frozenset[tuple[S, S]]:
    return frozenset((a, b) for a in froms for b in tos)


# DESIGN §3 table, row by row.  TERMINATING -> CANCELLED is our addition: a session cancelled
# after placement but before any kernel started ends CANCELLED, and must pass TERMINATING so
# that the kill orders for its (not yet started) kernels are accounted for.
SESSION_TRANSITIONS: frozenset[tuple[S, S]] = (
    _pairs({S.PENDING}, {S.SCHEDULED, S.CANCELLED})
    | _pairs({S.SCHEDULED, S.PREPARING}, {S.PREPARING})
    | _pairs({S.PREPARING}, {S.PULLING})
    | _pairs({S.SCHEDULED, S.PREPARING, S.PULLING}, {S.PREPARED})
    | _pairs({S.PREPARED}, {S.CREATING})
    | _pairs({S.CREATING}, {S.RUNNING})
    | _pairs(STARTUP_SESSION, {S.PENDING})
    | _pairs(NON_TERMINAL_SESSION - {S.TERMINATING}, {S.TERMINATING})
    | _pairs({S.TERMINATING}, {S.TERMINATED, S.ERROR, S.CANCELLED})
    | _pairs({S.RUNNING, S.TERMINATING}, {S.SUSPENDED})
    | _pairs({S.SUSPENDED}, {S.PENDING})
)

# Kernel moves.  Agents report the startup and exit moves; the coordinator moves kernels along
# with their session (placement, re-scheduling, cancellation of kernels never handed to an agent).
KERNEL_TRANSITIONS: frozenset[tuple[K, K]] = frozenset(
    {
        (K.PENDING, K.SCHEDULED),
        (K.SCHEDULED, K.PREPARING),
        (K.PREPARING, K.PULLING),
        (K.PREPARING, K.PREPARED),
        (K.PULLING, K.PREPARED),
        (K.PREPARED, K.CREATING),
        (K.CREATING, K.RUNNING),
        (K.SUSPENDED, K.PENDING),
        *((k, K.PENDING) for k in (K.SCHEDULED, K.PREPARING, K.PULLING, K.PREPARED, K.CREATING)),
        *((k, K.TERMINATING) for k in NON_TERMINAL_KERNEL - {K.TERMINATING}),
        *((k, end) for k in NON_TERMINAL_KERNEL for end in (K.TERMINATED, K.ERROR, K.CANCELLED)),
        (K.CREATING, K.SUSPENDED),
        (K.RUNNING, K.SUSPENDED),
        (K.TERMINATING, K.SUSPENDED),
    }
)


def session_move_allowed(src: SessionStatus, dst: SessionStatus) -> bool:
    return (src, dst) in SESSION_TRANSITIONS


def kernel_move_allowed(src: KernelStatus, dst: KernelStatus) -> bool:
    return (src, dst) in KERNEL_TRANSITIONS


def session_sources(dst: SessionStatus) -> frozenset[SessionStatus]:
    """Statuses from which a session may move to `dst`: the guard of the conditional UPDATE."""
    return frozenset(a for a, b in SESSION_TRANSITIONS if b == dst)


def kernel_sources(dst: KernelStatus) -> frozenset[KernelStatus]:
    """Statuses from which a kernel may move to `dst`: the guard of the conditional UPDATE."""
    return frozenset(a for a, b in KERNEL_TRANSITIONS if b == dst)


def kernel_chain(start: KernelStatus, reported: Sequence[KernelStatus]) -> tuple[bool, ...]:
    """Which of one kernel's reported statuses apply, in order, from `start`: each one whose
    source, the status reached so far, is legal; a refused one leaves the kernel where it was.
    (What applying them one guarded write at a time does, computed for a single write.)"""
    applied: list[bool] = []
    current = start
    for status in reported:
        applied.append(kernel_move_allowed(current, status))
        if applied[-1]:
            current = status
    return tuple(applied)
