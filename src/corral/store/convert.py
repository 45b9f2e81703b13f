"""Row to record conversion (the only code that reads result rows)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Row

from corral.domain.resources import ResourceSlots
from corral.domain.status import AgentStatus, KernelStatus, SessionStatus
from corral.store.records import AgentRecord, HistoryRecord, KernelRecord, SessionRecord


def kernel(row: Row[Any]) -> KernelRecord:
    m = dict(row._mapping)
    m["status"] = KernelStatus(m["status"])
    m["resources"] = ResourceSlots.from_json(m["resources"])
    return KernelRecord(**m)


def session(row: Row[Any], kernels: tuple[KernelRecord, ...] = ()) -> SessionRecord:
    m = dict(row._mapping)
    m["status"] = SessionStatus(m["status"])
    m["resources"] = ResourceSlots.from_json(m["resources"])
    return SessionRecord(**m, kernels=kernels)


def agent(row: Row[Any], used: ResourceSlots | None = None) -> AgentRecord:
    m = dict(row._mapping)
    m["status"] = AgentStatus(m["status"])
    m["capacity"] = ResourceSlots.from_json(m["capacity"])
    return AgentRecord(**m, used=used or ResourceSlots())


def history(row: Row[Any]) -> HistoryRecord:
    return HistoryRecord(**dict(row._mapping))
