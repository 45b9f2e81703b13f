"""What preemption reads and writes: running sessions, reservations, a group's settings."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Any

from sqlalchemy import Text, bindparam, cast, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.records import RunningRecord
from corral.domain.status import TERMINAL_SESSION, SessionStatus
from corral.store.convert import slots_of
from corral.store.tables import kernels, resource_groups, sessions


async def running_in(conn: AsyncConnection, resource_group: str) -> list[RunningRecord]:
    """RUNNING sessions of the group nobody has asked to stop yet (possible victims), with where
    their kernels run: one join, only the columns needed (a full cluster has thousands)."""
    rows = await conn.execute(
        select(
            sessions.c.id,
            sessions.c.priority,
            sessions.c.started_at,
            sessions.c.timeout,
            kernels.c.agent_id,
            cast(kernels.c.resources, Text),
        )
        .join(kernels, kernels.c.session_id == sessions.c.id)
        .where(
            sessions.c.resource_group == resource_group,
            sessions.c.status == str(SessionStatus.RUNNING),
            sessions.c.termination_reason.is_(None),
        )
        .order_by(sessions.c.id, kernels.c.rank)
    )
    found: list[RunningRecord] = []
    for (sid, priority, started_at, timeout), group in groupby(rows, key=lambda r: tuple(r[:4])):
        placed = tuple((agent_id, slots_of(resources)) for *_, agent_id, resources in group)
        found.append(RunningRecord(sid, priority, started_at, timeout, placed))
    return found


async def reserve(
    conn: AsyncConnection, session_id: str, agents: Sequence[str], victims: Sequence[str]
) -> None:
    await conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id)
        .values(reservation={"agents": sorted(set(agents)), "victims": list(victims)})
    )


async def release(conn: AsyncConnection, session_ids: Sequence[str]) -> None:
    if session_ids:
        await conn.execute(
            update(sessions).where(sessions.c.id.in_(list(session_ids))).values(reservation=None)
        )


async def live(conn: AsyncConnection, session_ids: Sequence[str]) -> set[str]:
    """Those of the sessions that still hold capacity (not ended, not suspended)."""
    if not session_ids:
        return set()
    gone = [str(s) for s in TERMINAL_SESSION | {SessionStatus.SUSPENDED}]
    rows = await conn.execute(
        select(sessions.c.id).where(sessions.c.id.in_(list(session_ids)), sessions.c.status.not_in(gone))
    )
    return {str(r.id) for r in rows}


_GROUP_CONFIG = select(resource_groups.c.config).where(resource_groups.c.name == bindparam("name"))


async def group_config(conn: AsyncConnection, name: str) -> dict[str, Any] | None:
    row = (await conn.execute(_GROUP_CONFIG, {"name": name})).first()
    return dict(row.config or {}) if row else None


async def set_group_config(conn: AsyncConnection, name: str, cfg: dict[str, Any]) -> None:
    await conn.execute(update(resource_groups).where(resource_groups.c.name == name).values(config=cfg))


async def groups(conn: AsyncConnection) -> list[tuple[str, dict[str, Any]]]:
    rows = await conn.execute(
        select(resource_groups.c.name, resource_groups.c.config).order_by(resource_groups.c.name)
    )
    return [(r.name, dict(r.config or {})) for r in rows]


async def holds(conn: AsyncConnection, resource_group: str) -> list[tuple[str, list[str]]]:
    """The group's preemptors and the agents each holds while its victims stop (ix_sessions_held)."""
    rows = await conn.execute(
        select(sessions.c.id, sessions.c.reservation).where(
            sessions.c.resource_group == resource_group, sessions.c.reservation.is_not(None)
        )
    )
    return [(str(sid), sorted((held or {}).get("agents", []))) for sid, held in rows]
