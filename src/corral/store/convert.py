"""Row to record conversion (the only code that reads result rows)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from sqlalchemy.engine import Row

from corral.domain.cause import Cause
from corral.domain.placement import PlacementStrategy
from corral.domain.resources import ResourceSlots
from corral.domain.spec import ErrorStrategy, RetryPolicy, SessionSpec, SessionType
from corral.domain.status import AgentStatus, KernelStatus, SessionResult, SessionStatus
from corral.store.records import AgentRecord, HistoryRecord, KernelRecord, SessionRecord

Source = Row[Any] | Mapping[str, Any]


def _fields(row: Source) -> dict[str, Any]:
    return dict(row._mapping) if isinstance(row, Row) else dict(row)


def kernel(row: Source) -> KernelRecord:
    m = _fields(row)
    m["status"] = KernelStatus(m["status"])
    m["resources"] = ResourceSlots.from_json(m["resources"])
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
)


def spec_columns(spec: SessionSpec) -> dict[str, Any]:
    """The one place a spec becomes columns (and `spec` below is the way back)."""
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
        "spec_hash": spec.digest(),
        "array_id": spec.array_id,
        "array_index": spec.array_index,
    }


def spec(m: Mapping[str, Any]) -> SessionSpec:
    policy = m["retry_policy"]
    return SessionSpec(
        command=tuple(m["command"]),
        resources=ResourceSlots.from_json(m["resources"]),
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
    )


def session(row: Source, kernels: tuple[KernelRecord, ...] = ()) -> SessionRecord:
    m = _fields(row)
    m["spec"] = spec(m)
    for name in _SPEC_COLUMNS:
        del m[name]
    m["status"] = SessionStatus(m["status"])
    m["result"] = SessionResult(m["result"])
    m["cause"] = Cause(m["cause"]) if m["cause"] else None
    m["retry_cause"] = Cause(m["retry_cause"]) if m["retry_cause"] else None
    m["rule_counts"] = dict(m["rule_counts"] or {})
    return SessionRecord(**m, kernels=kernels)


def agent(row: Row[Any], used: ResourceSlots | None = None) -> AgentRecord:
    m = dict(row._mapping)
    m["status"] = AgentStatus(m["status"])
    m["capacity"] = ResourceSlots.from_json(m["capacity"])
    return AgentRecord(**m, used=used or ResourceSlots())


def history(row: Row[Any]) -> HistoryRecord:
    return HistoryRecord(**dict(row._mapping))


@lru_cache(maxsize=4096)
def slots_of(text: str) -> ResourceSlots:
    """Slots from their stored JSON text (immutable, so one parse serves every equal row)."""
    return ResourceSlots.from_json(json.loads(text))
