"""Named retry policies and projects' retry configuration (admin), every change audited."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from corral.clock import utcnow
from corral.domain.errors import Duplicate
from corral.domain.policy import PolicyError, policy_from
from corral.domain.priority import PriorityRules, overlay
from corral.domain.records import Principal, ProjectRecord
from corral.services.errors import Conflict, InvalidInput, NotFound
from corral.store import config
from corral.store.db import reading, transaction
from corral.store.unit import Engine, Tx


async def apply(engine: Engine, who: Principal, name: str, spec: dict[str, Any]) -> bool:
    """Create or replace a policy (its rules checked first); True when created."""
    try:
        policy_from(name, spec)
    except PolicyError as exc:
        raise InvalidInput(exc.field, str(exc)) from None
    now = utcnow()
    async with transaction(engine) as conn:
        created = await config.put_policy(conn, name, spec, now)
        await config.audit(
            conn, who.name, "policy.create" if created else "policy.update", name, "applied", now
        )
    return created


async def get(engine: Engine, name: str) -> dict[str, Any]:
    async with reading(engine) as conn:
        found = await config.policies(conn, [name])
        times = await config.policy_times(conn, name)
    if name not in found or times is None:
        raise NotFound(f"no retry policy {name[:80]!r}", {"field": "name"})
    return _doc(name, found[name], times)


async def list_all(engine: Engine) -> list[dict[str, Any]]:
    async with reading(engine) as conn:
        found = await config.policies(conn)
        return [_doc(n, s, await config.policy_times(conn, n)) for n, s in found.items()]


def _doc(name: str, spec: dict[str, Any], times: tuple[datetime, datetime] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if times:
        meta.update(created_at=times[0].isoformat(), updated_at=times[1].isoformat())
    return {"metadata": meta, "spec": spec}


async def delete(engine: Engine, who: Principal, name: str) -> None:
    now = utcnow()
    async with transaction(engine) as conn:
        bound = await config.projects_binding(conn, name)
        if bound:
            raise Conflict(
                f"retry policy {name!r} is bound to project(s) {', '.join(bound)}; unbind it first",
                {"field": "name", "projects": bound},
            )
        if (await config.cluster_settings(conn)).default_policy == name:
            raise Conflict(
                f"retry policy {name!r} is the cluster's retry.default_policy; change that first",
                {"field": "name"},
            )
        if not await config.delete_policy(conn, name):
            raise NotFound(f"no retry policy {name[:80]!r}", {"field": "name"})
        await config.audit(conn, who.name, "policy.delete", name, "deleted", now)


async def check_names(conn: Tx, names: list[str], field: str) -> None:
    """Every named policy exists (a typo would silently retry nothing)."""
    if not names:
        return
    known = await config.policies(conn, names)
    for i, name in enumerate(names):
        if name not in known:
            raise InvalidInput(f"{field}.{i}", f"no retry policy {name[:80]!r} (see `corral policy list`)")


async def create_project(engine: Engine, who: Principal, name: str, cfg: Mapping[str, Any]) -> ProjectRecord:
    now = utcnow()
    try:
        async with transaction(engine) as conn:
            await check_names(conn, list(cfg.get("retry_policies") or []), "retry_policies")
            await config.create_project(conn, name, dict(cfg), now)
            await config.audit(conn, who.name, "project.create", name, _describe(cfg), now)
    except Duplicate:
        raise Conflict(f"project {name!r} already exists", {"field": "name"}) from None
    return await get_project(engine, name)


def check_priority_rules(raw: Mapping[str, Any] | None) -> None:
    """Rules merged from several changes must still make a range."""
    rules = overlay(PriorityRules(), raw)
    if rules.min > rules.max:
        raise InvalidInput("priority_rules.min", f"min {rules.min} is above max {rules.max}")


async def update_project(
    engine: Engine, who: Principal, name: str, changes: Mapping[str, Any]
) -> ProjectRecord:
    now = utcnow()
    async with transaction(engine) as conn:
        found = await config.project_rows(conn, name)
        if not found:
            raise NotFound(f"no project {name[:80]!r}", {"field": "name"})
        cfg = {**found[0].config, **changes}
        for key in ("retry_defaults", "priority_rules"):
            if key in changes:  # merged into the project's own; null clears them
                given = changes[key]
                cfg[key] = {} if given is None else {**found[0].config.get(key, {}), **given}
        check_priority_rules(cfg.get("priority_rules"))
        await check_names(conn, list(cfg.get("retry_policies") or []), "retry_policies")
        await config.set_project_config(conn, name, cfg)
        await config.audit(conn, who.name, "project.update", name, _describe(changes), now)
    return await get_project(engine, name)


def _describe(cfg: Mapping[str, Any]) -> str:
    return "; ".join(f"{k}={v!r}"[:200] for k, v in sorted(cfg.items())) or "no change"


async def get_project(engine: Engine, name: str) -> ProjectRecord:
    async with reading(engine) as conn:
        found = await config.project_rows(conn, name)
    if not found:
        raise NotFound(f"no project {name[:80]!r}", {"field": "name"})
    return found[0]


async def list_projects(engine: Engine) -> list[ProjectRecord]:
    async with reading(engine) as conn:
        return await config.project_rows(conn)
