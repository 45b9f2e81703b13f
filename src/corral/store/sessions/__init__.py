"""Sessions: insert, read, guarded status moves, termination requests."""

from __future__ import annotations

from corral.store.sessions.insert import (
    Written,
    find_creation,
    insert_many,
    insert_rows,
    insert_session,
    insert_sessions,
    records_of,
)
from corral.store.sessions.moves import apply_moves, bump_tries, move_kernels_of, with_running_kernels
from corral.store.sessions.queue import QueueKey, for_handler, queue_key, target_ids
from corral.store.sessions.read import (
    count_by_status,
    get,
    get_many,
    list_sessions,
    live_statuses,
    select_with_kernels,
)
from corral.store.sessions.termination import (
    clear_termination_request,
    due_deadlines,
    lock,
    request_termination,
    request_terminations,
    sweep_due,
)

__all__ = [
    "QueueKey",
    "Written",
    "apply_moves",
    "bump_tries",
    "clear_termination_request",
    "count_by_status",
    "due_deadlines",
    "find_creation",
    "for_handler",
    "get",
    "get_many",
    "insert_many",
    "insert_rows",
    "insert_session",
    "insert_sessions",
    "list_sessions",
    "live_statuses",
    "lock",
    "move_kernels_of",
    "queue_key",
    "records_of",
    "request_termination",
    "request_terminations",
    "select_with_kernels",
    "sweep_due",
    "target_ids",
    "with_running_kernels",
]
