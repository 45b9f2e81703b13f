"""Row to record conversion (the only code that reads result rows)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from sqlalchemy.engine import Result, Row

from corral.domain.cause import Cause
from corral.domain.placement import PlacementStrategy
from corral.domain.records import AgentRecord, HistoryRecord, KernelRecord, SessionRecord
from corral.domain.resources import ResourceSlots
from corral.domain.spec import ErrorStrategy, RetryPolicy, SessionSpec, SessionType
from corral.domain.status import AgentStatus, KernelStatus, SessionResult, SessionStatus

Source = Row[Any] | Mapping[str, Any]


def _fields(row: Source, owned: bool = False) -> dict[str, Any]:
    """The row's columns by name; `owned`: a dict of `mappings`, changed in place, not copied."""
    if isinstance(row, Row):
        return dict(zip(names(row._fields), row, strict=True))
    return row if owned and isinstance(row, dict) else dict(row)


def mappings(result: Result[Any]) -> list[dict[str, Any]]:
    """A result's rows as dicts keyed by its column names, named once for the whole result (a
    row's own names are rebuilt at every call, on every row of every handler's read)."""
    keys = names(tuple(result.keys()))
    return [dict(zip(keys, row, strict=True)) for row in result]


@lru_cache(maxsize=256)
def names(fields: tuple[str, ...]) -> tuple[str, ...]:
    """Column names, interned: SQLAlchemy's are str subclasses (quoted_name), and a record built
    from them matches each keyword to its field by comparing text instead of identity, which would
    be most of what building a record costs, on every row of every handler's read."""
    return tuple(sys.intern(str(name)) for name in fields)


# Status columns by value: a dict look-up, where calling the enum costs a microsecond a column.
_KERNEL_STATUS = {str(s): s for s in KernelStatus}
_SESSION_STATUS = {str(s): s for s in SessionStatus}
_RESULT = {str(r): r for r in SessionResult}


def session_status(value: str) -> SessionStatus:
    return _SESSION_STATUS[value]


def kernel_status(value: str) -> KernelStatus:
    return _KERNEL_STATUS[value]


def _slots(raw: Mapping[str, Any]) -> ResourceSlots:
    """Slots from a decoded JSON column, one parse per distinct value (they are immutable)."""
    return _slots_of_items(tuple(raw.items()))


@lru_cache(maxsize=4096)
def _slots_of_items(items: tuple[tuple[str, Any], ...]) -> ResourceSlots:
    return ResourceSlots.from_json(dict(items))


def kernel(row: Source, owned: bool = False) -> KernelRecord:
    m = _fields(row, owned)
    m.pop("ended", None)  # the database's own, computed from the status
    m["status"] = _KERNEL_STATUS[m["status"]]
    m["resources"] = _slots(m["resources"])
    return KernelRecord(**m)


_SPEC_COLUMNS = (
    "command",
    "resources",
    "env",
    "type",
    "cluster_size",
    "priority",
    "resource_group",
    "project",
    "placement",
    "image",
    "timeout",
    "error_strategy",
    "retry_policy",
    "retry_policies",
    "creation_id",
    "spec_hash",
    "array_id",
    "array_index",
    "workdir",
)


def spec_columns(spec: SessionSpec, spec_hash: str | None = None) -> dict[str, Any]:
    """The one place a spec becomes columns (and `spec` below is the way back); `spec_hash`, when
    given, is stored instead of the spec's own digest (an array element: the whole request's)."""
    return {
        "command": list(spec.command),
        "resources": spec.resources.nonzero().to_json(),
        "env": dict(spec.env),
        "type": str(spec.type),
        "cluster_size": spec.cluster_size,
        "priority": spec.priority,
        "resource_group": spec.resource_group,
        "project": spec.project,
        "placement": str(spec.placement),
        "image": spec.image,
        "timeout": spec.timeout,
        "error_strategy": str(spec.error_strategy),
        "retry_policy": spec.retry_policy.to_json() if spec.retry_policy else None,
        "retry_policies": list(spec.retry_policies),
        "creation_id": spec.creation_id,
        "spec_hash": spec_hash if spec_hash is not None else spec.digest(),
        "array_id": spec.array_id,
        "array_index": spec.array_index,
        "workdir": spec.workdir,
    }


def spec(m: Mapping[str, Any]) -> SessionSpec:
    policy = m["retry_policy"]
    return SessionSpec(
        command=tuple(m["command"]),
        resources=_slots(m["resources"]),
        env=dict(m["env"] or {}),
        name=m["name"],
        type=SessionType(m["type"]),
        cluster_size=m["cluster_size"],
        priority=m["priority"],
        resource_group=m["resource_group"],
        project=m["project"],
        placement=PlacementStrategy(m["placement"]),
        image=m["image"],
        timeout=m["timeout"],
        error_strategy=ErrorStrategy(m["error_strategy"]),
        retry_policy=RetryPolicy.from_json(policy) if policy else None,
        retry_policies=tuple(m["retry_policies"] or ()),
        creation_id=m["creation_id"],
        array_id=m["array_id"],
        array_index=m["array_index"],
        workdir=m["workdir"],
    )


def session(row: Source, kernels: tuple[KernelRecord, ...] = (), owned: bool = False) -> SessionRecord:
    m = _fields(row, owned)
    m["spec"] = spec(m)
    for name in _SPEC_COLUMNS:
        del m[name]
    m["status"] = _SESSION_STATUS[m["status"]]
    m["result"] = _RESULT[m["result"]]
    m["cause"] = Cause(m["cause"]) if m["cause"] else None
    m["retry_cause"] = Cause(m["retry_cause"]) if m["retry_cause"] else None
    m["rule_counts"] = dict(m["rule_counts"] or {})
    return SessionRecord(**m, kernels=kernels)


def agent(row: Row[Any], used: ResourceSlots | None = None) -> AgentRecord:
    m = _fields(row)
    m["status"] = AgentStatus(m["status"])
    m["capacity"] = ResourceSlots.from_json(m["capacity"])
    return AgentRecord(**m, used=used or ResourceSlots())


def history(row: Row[Any]) -> HistoryRecord:
    return HistoryRecord(**_fields(row))


@lru_cache(maxsize=4096)
def slots_of(text: str) -> ResourceSlots:
    """Slots from their stored JSON text (immutable, so one parse serves every equal row)."""
    return ResourceSlots.from_json(json.loads(text))
