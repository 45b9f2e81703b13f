"""A session named by the start of its id (as `corral run` prints it), among those the caller sees."""

from __future__ import annotations

import re

from corral.domain.records import Principal
from corral.services.errors import Conflict, NotFound
from corral.store import session_ids
from corral.store.unit import Tx

SHORT_ID = re.compile(r"^[0-9a-f][0-9a-f-]*$")
SHORT_ID_DIGITS = 8
"""A session may be named by the start of its id, of at least this many hex digits."""
SHOWN_MATCHES = 10


async def full_id(conn: Tx, who: Principal, given: str, field: str = "id") -> str:
    """The id `given` starts, among the sessions the caller may see (404 none, 409 several); `given`
    itself when it is no short id (a full id, or no id at all: the caller's look-up finds nothing)."""
    prefix = given.lower()
    if len(given) >= 36 or not SHORT_ID.match(prefix) or len(prefix.replace("-", "")) < SHORT_ID_DIGITS:
        return given
    projects = None if who.is_admin else who.projects
    matches = await session_ids.with_prefix(conn, prefix, projects, SHOWN_MATCHES + 1)
    if not matches:
        raise NotFound(f"no session {given[:80]}", {"field": field})
    if len(matches) > 1:
        more = " and more" if len(matches) > SHOWN_MATCHES else ""
        shown = ", ".join(f"{sid} ({name})" for sid, name in matches[:SHOWN_MATCHES])
        raise Conflict(
            f"{given} starts the ids of several sessions: {shown}{more}; give more of the id",
            {"field": field, "matches": [sid for sid, _ in matches[:SHOWN_MATCHES]]},
        )
    return matches[0][0]
