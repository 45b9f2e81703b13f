"""Which worker's error is a failed session's root cause (DESIGN §4): a pure, order-independent
function of the records, with the strategy the session chose."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from corral.domain.error_record import ErrorRecord, Source
from corral.domain.spec import ErrorStrategy

# Errors a worker gets because a peer vanished or Corral stopped it, not because of its own fault
# (plain phrases: a session of 10,000 workers is judged in milliseconds, not a regex per record).
_SIDE_EFFECT_PHRASES = (
    "connection closed",
    "connection reset",
    "connection refused",
    "connection aborted",
    "closed by peer",
    "reset by peer",
    "broken pipe",
    "econnreset",
    "econnrefused",
    "remote worker",
    "remote process",
    "remote peer",
    "peer closed",
    "peer gone",
    "peer disconnected",
    "peer exited",
    "lost peer",
    "ncclremoteerror",
    "nccl communicator was aborted",
    "collective operation timeout",
    "watchdog caught collective",
    "failed to recv, got 0 bytes",
    "socket timeout",
    "the client socket has timed out",
    "connection to the store",
    "got signal: 15",
    "got signal: 9",
    "signalexception",
)
_SIDE_EFFECT_TYPES = frozenset(
    {
        "ConnectionResetError",
        "ConnectionRefusedError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        "DistNetworkError",
        "torch.distributed.DistNetworkError",
        "SignalException",
        "torch.distributed.elastic.multiprocessing.api.SignalException",
    }
)


def is_side_effect(r: ErrorRecord) -> bool:
    """Peer gone, connection reset/refused, NCCL/gloo remote errors, collective timeouts, or a stop
    Corral sent: the worker failed because something else did."""
    if r.killed_by_corral:
        return True
    if r.type in _SIDE_EFFECT_TYPES:
        return True
    text = r.message[:2048].lower()
    if any(phrase in text for phrase in _SIDE_EFFECT_PHRASES):
        return True
    # A backend's own words for losing its peers: gloo timing out, NCCL blaming the remote side.
    return ("gloo" in text and ("timed out" in text or "timeout" in text)) or (
        "nccl" in text and "remote" in text
    )


@dataclass(frozen=True)
class RootCause:
    """The record blamed for a session's failure, and how it was chosen."""

    record: ErrorRecord
    """The root-cause worker's record."""
    strategy: ErrorStrategy
    """The strategy that chose it."""


def default_strategy(cluster_size: int) -> ErrorStrategy:
    return ErrorStrategy.EARLIEST_PRIMARY if cluster_size > 1 else ErrorStrategy.SINGLE


def _earliest(records: Sequence[ErrorRecord]) -> ErrorRecord:
    # Timestamps compared at the coarsest resolution present: torch's whole seconds tie, and the tie
    # goes to the agent-observed exit, then rank, then name -- never to arrival order or chance.
    coarse = (
        max(r.resolution_ns for r in records if r.timestamp_ns is not None)
        if any(r.timestamp_ns is not None for r in records)
        else 1
    )

    def key(r: ErrorRecord) -> tuple[bool, int, bool, int, int, str, str]:
        return (
            r.timestamp_ns is None,
            (r.timestamp_ns or 0) // coarse,
            r.exited_at_ns is None,
            r.exited_at_ns or 0,
            r.rank,
            r.worker,
            r.kernel_id,
        )

    return min(records, key=key)


def _stopped(r: ErrorRecord) -> bool:
    """Corral stopped it and it said nothing of its own: never a root cause.  (A worker that wrote
    its error and was then stopped while it lingered keeps its record.)"""
    return r.killed_by_corral and r.source is Source.SYNTHESIZED


def aggregate(records: Iterable[ErrorRecord], strategy: ErrorStrategy) -> RootCause | None:
    """The root cause, or None when no worker failed on its own (Corral stopped them all)."""
    own = [r for r in records if not _stopped(r)]
    if not own:
        return None
    if strategy is ErrorStrategy.SINGLE:
        # The main kernel's record; when the main kernel did not fail on its own (Corral stopped it
        # because another worker failed), the earliest of the others.
        main = [r for r in own if r.rank == 0]
        return RootCause(main[0] if main else _earliest(own), strategy)
    if strategy is ErrorStrategy.EARLIEST_PRIMARY:
        primary = [r for r in own if not is_side_effect(r)]
        return RootCause(_earliest(primary or own), strategy)
    return RootCause(_earliest(own), strategy)


def ordered(records: Iterable[ErrorRecord], root: RootCause | None) -> list[ErrorRecord]:
    """Every record for display: the root cause first, then by time, rank and name."""
    rest = sorted(
        (r for r in records if root is None or r is not root.record),
        key=lambda r: (r.timestamp_ns is None, r.timestamp_ns or 0, r.rank, r.worker, r.kernel_id),
    )
    return ([root.record] if root else []) + rest
