"""Row to record conversion (the only code that reads result rows)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import Row

from corral.domain.resources import ResourceSlots
from corral.domain.status import AgentStatus, KernelStatus, SessionStatus
from corral.store.records import AgentRecord, HistoryRecord, KernelRecord, SessionRecord

Source = Row[Any] | Mapping[str, Any]


def _fields(row: Source) -> dict[str, Any]:
    return dict(row._mapping) if isinstance(row, Row) else dict(row)


def kernel(row: Source) -> KernelRecord:
    m = _fields(row)
    m["status"] = KernelStatus(m["status"])
    m["resources"] = ResourceSlots.from_json(m["resources"])
    return KernelRecord(**m)


def session(row: Source, kernels: tuple[KernelRecord, ...] = ()) -> SessionRecord:
    m = _fields(row)
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
