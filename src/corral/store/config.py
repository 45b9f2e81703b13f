"""Cluster settings, named retry policies and the audit log: small tables every manager shares."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, literal, select, union_all, update
from sqlalchemy.ext.asyncio import AsyncConnection

from corral.domain.cluster import ClusterSettings, settings_of, values_of
from corral.domain.records import AuditRecord, ProjectRecord
from corral.store.tables import audit_log, cluster_config, projects, retry_policies, users

# Read on every submit: built once.
_CLUSTER_VALUES = select(cluster_config.c.key, cluster_config.c.value)
# (kind, key, value): the project's config, the user's, and each cluster setting.
_SUBMITTER_CONFIGS = union_all(
    select(literal("project"), literal(""), projects.c.config).where(projects.c.name == bindparam("project")),
    select(literal("user"), literal(""), users.c.config).where(users.c.id == bindparam("user_id")),
    select(literal("cluster"), cluster_config.c.key, cluster_config.c.value),
)


async def cluster_values(conn: AsyncConnection) -> dict[str, Any]:
    return {key: value for key, value in await conn.execute(_CLUSTER_VALUES)}


async def cluster_settings(conn: AsyncConnection) -> ClusterSettings:
    """The typed settings (PolicyError, naming the setting, when a stored one cannot be used)."""
    return settings_of(values_of(await cluster_values(conn)))


async def set_cluster_values(conn: AsyncConnection, values: Mapping[str, Any], now: datetime) -> None:
    for key, value in values.items():
        found = await conn.execute(
            update(cluster_config).where(cluster_config.c.key == key).values(value=value, updated_at=now)
        )
        if not found.rowcount:
            await conn.execute(insert(cluster_config).values(key=key, value=value, updated_at=now))


async def policies(conn: AsyncConnection, names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Stored policy specs by name (all of them, or those named)."""
    query = select(retry_policies.c.name, retry_policies.c.spec).order_by(retry_policies.c.name)
    if names is not None:
        query = query.where(retry_policies.c.name.in_(names))
    return {name: spec for name, spec in await conn.execute(query)}


async def policy_times(conn: AsyncConnection, name: str) -> tuple[datetime, datetime] | None:
    row = (
        await conn.execute(
            select(retry_policies.c.created_at, retry_policies.c.updated_at).where(
                retry_policies.c.name == name
            )
        )
    ).first()
    return (row.created_at, row.updated_at) if row else None


async def put_policy(conn: AsyncConnection, name: str, spec: dict[str, Any], now: datetime) -> bool:
    """Create or replace; True when it was created."""
    found = await conn.execute(
        update(retry_policies).where(retry_policies.c.name == name).values(spec=spec, updated_at=now)
    )
    if found.rowcount:
        return False
    await conn.execute(insert(retry_policies).values(name=name, spec=spec, created_at=now, updated_at=now))
    return True


async def delete_policy(conn: AsyncConnection, name: str) -> bool:
    return bool((await conn.execute(delete(retry_policies).where(retry_policies.c.name == name))).rowcount)


async def project_config(conn: AsyncConnection, name: str) -> dict[str, Any] | None:
    row = (await conn.execute(select(projects.c.config).where(projects.c.name == name))).first()
    return dict(row.config or {}) if row else None


async def submitter_configs(
    conn: AsyncConnection, project: str, user_id: str
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The project's config, the user's ({} when unset) and the cluster's values (cluster_values),
    in one query: every submit needs all three."""
    found: dict[str, dict[str, Any]] = {"project": {}, "user": {}, "cluster": {}}
    for kind, key, value in await conn.execute(_SUBMITTER_CONFIGS, {"project": project, "user_id": user_id}):
        if kind == "cluster":
            found[kind][key] = value
        else:
            found[kind] = dict(value or {})
    return found["project"], found["user"], found["cluster"]


async def projects_binding(conn: AsyncConnection, policy: str) -> list[str]:
    """Projects whose config binds this policy."""
    rows = await conn.execute(select(projects.c.name, projects.c.config))
    return sorted(n for n, cfg in rows if policy in ((cfg or {}).get("retry_policies") or []))


async def audit(
    conn: AsyncConnection, actor: str, action: str, target: str, reason: str, now: datetime
) -> None:
    await conn.execute(
        insert(audit_log).values(
            actor=actor, action=action, target=target[:255], reason=reason, created_at=now
        )
    )


async def audit_rows(
    conn: AsyncConnection, after: int = 0, limit: int = 100, action: str | None = None
) -> list[AuditRecord]:
    query = select(audit_log).where(audit_log.c.id > after).order_by(audit_log.c.id).limit(limit)
    if action:
        query = query.where(audit_log.c.action == action)
    return [AuditRecord(**dict(r._mapping)) for r in await conn.execute(query)]


async def project_rows(conn: AsyncConnection, name: str | None = None) -> list[ProjectRecord]:
    query = select(projects.c.name, projects.c.config, projects.c.created_at).order_by(projects.c.name)
    if name is not None:
        query = query.where(projects.c.name == name)
    return [ProjectRecord(r.name, dict(r.config or {}), r.created_at) for r in await conn.execute(query)]


async def create_project(conn: AsyncConnection, name: str, cfg: dict[str, Any], now: datetime) -> None:
    await conn.execute(insert(projects).values(id=str(uuid.uuid4()), name=name, config=cfg, created_at=now))


async def set_project_config(conn: AsyncConnection, name: str, cfg: dict[str, Any]) -> None:
    await conn.execute(update(projects).where(projects.c.name == name).values(config=cfg))
