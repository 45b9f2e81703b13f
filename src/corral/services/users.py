"""Users, memberships and API keys (admin), and who the caller is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from corral.clock import utcnow
from corral.domain.errors import Duplicate
from corral.domain.priority import effective
from corral.domain.records import ApiKeyRecord, Principal, UserRecord
from corral.services import identities
from corral.services.errors import Conflict, InvalidInput, NotFound, Unauthorized
from corral.services.policies import check_priority_rules
from corral.store import auth, config, users
from corral.store.auth import new_key
from corral.store.db import reading, transaction
from corral.store.unit import Engine, Tx


class Unset:
    """A field the request did not set (unlike null, which clears)."""


UNSET = Unset()


async def identify(reader: Engine, key: str) -> Principal:
    """The caller with this API key; 401 for a key nobody has.  Looked up on every request, never
    cached: a revoked key is refused from its next request, on every manager (requests with one
    key at once share a read begun after each arrived: services/identities)."""
    return known(await identities.holder(reader, key))


def known(who: Principal | None) -> Principal:
    """The caller a key look-up found, or 401."""
    if who is None:
        raise unknown_key()
    return who


def unknown_key() -> Unauthorized:
    return Unauthorized("unknown API key", {"field": "authorization"})


async def _check_projects(conn: Tx, names: Sequence[str]) -> None:
    missing = await users.missing_projects(conn, names)
    if missing:
        index = list(names).index(missing[0])
        raise InvalidInput(f"projects.{index}", f"no project {missing[0][:80]!r}")


async def create(
    engine: Engine, who: Principal, name: str, role: str, projects: Sequence[str]
) -> tuple[UserRecord, str, str]:
    """The new user, a first API key for them (shown once) and its id."""
    now = utcnow()
    key = new_key()
    try:
        async with transaction(engine) as conn:
            await _check_projects(conn, projects)
            user_id = await users.create(conn, name, role, projects, now)
            key_id = await auth.insert_key(conn, user_id, key, now)
            await config.audit(
                conn, who.name, "user.create", name, f"role {role}; projects {list(projects)}", now
            )
    except Duplicate:
        raise Conflict(f"user {name!r} already exists", {"field": "name"}) from None
    return await get(engine, name), key, key_id


async def _found(conn: Tx, name: str) -> UserRecord:
    found = await users.find(conn, name)
    if found is None:
        raise NotFound(f"no user {name[:80]!r}", {"field": "name"})
    return found


async def get(engine: Engine, name: str) -> UserRecord:
    async with reading(engine) as conn:
        found = await _found(conn, name)
    return found


async def listed(engine: Engine) -> list[UserRecord]:
    async with reading(engine) as conn:
        return await users.listed(conn)


async def update(
    engine: Engine,
    who: Principal,
    name: str,
    role: str | None,
    projects: Sequence[str] | None,
    priority_rules: Mapping[str, Any] | Unset | None = UNSET,
    run_as: Mapping[str, Any] | Unset | None = UNSET,
    default_project: str | Unset | None = UNSET,
) -> UserRecord:
    """`priority_rules` is merged field by field into the user's own (None clears them); `run_as`
    replaces their uid/gid mapping (None clears it); `default_project` (one of their projects) is
    where their sessions go when they name none."""
    now = utcnow()
    async with transaction(engine) as conn:
        found = await _found(conn, name)
        if found.id == who.user_id and role is not None and role != found.role:
            raise InvalidInput("role", "an admin cannot change their own role (ask another admin)")
        if projects is not None:
            await _check_projects(conn, projects)
            await users.set_projects(conn, found.id, projects)
        if role is not None:
            await users.set_role(conn, found.id, role)
        if not isinstance(priority_rules, Unset):
            cfg = dict(found.config)
            cfg["priority_rules"] = (
                {} if priority_rules is None else {**cfg.get("priority_rules", {}), **priority_rules}
            )
            check_priority_rules(cfg["priority_rules"])
            await users.set_config(conn, found.id, cfg)
        if not isinstance(run_as, Unset):
            cfg = dict(await users.config_of(conn, found.id))
            cfg["run_as"] = dict(run_as) if run_as else None
            await users.set_config(conn, found.id, cfg)
        if not isinstance(default_project, Unset):
            cfg = dict(await users.config_of(conn, found.id))
            if default_project is not None:
                members = projects if projects is not None else found.projects
                if default_project not in members:
                    theirs = ", ".join(sorted(members)) or "none"
                    raise InvalidInput(
                        "default_project", f"{default_project!r} is not one of their projects ({theirs})"
                    )
            cfg["default_project"] = default_project
            await users.set_config(conn, found.id, cfg)
        what = f"role {role}; projects {projects}; priority rules {priority_rules}; run as {run_as}"
        what += f"; default project {default_project}"
        await config.audit(conn, who.name, "user.update", name, what, now)
    return await get(engine, name)


async def me(engine: Engine, who: Principal) -> dict[str, Any]:
    """Who the caller is, and the priority rules that apply to them in each of their projects."""
    async with reading(engine) as conn:
        own = (await users.config_of(conn, who.user_id)).get("priority_rules")
        rules = {}
        for project in sorted(who.projects):
            project_cfg = await config.project_config(conn, project) or {}
            rules[project] = effective(project_cfg.get("priority_rules"), own).to_json()
    return {"name": who.name, "role": who.role, "projects": sorted(who.projects), "priority": rules}


async def add_key(engine: Engine, who: Principal, name: str) -> tuple[str, str]:
    """A new key for the user (shown once) and its id."""
    now = utcnow()
    key = new_key()
    async with transaction(engine) as conn:
        found = await _found(conn, name)
        key_id = await auth.insert_key(conn, found.id, key, now)
        await config.audit(conn, who.name, "key.create", name, f"key {key[:8]}…", now)
    return key, key_id


async def keys(engine: Engine, name: str) -> list[ApiKeyRecord]:
    found = await get(engine, name)
    async with reading(engine) as conn:
        return await users.keys(conn, found.id)


async def revoke(engine: Engine, who: Principal, name: str, key_id: str) -> None:
    """Effective at once: keys are looked up on every request, never cached."""
    now = utcnow()
    async with transaction(engine) as conn:
        found = await _found(conn, name)
        if found.role == "admin" and not await users.admin_keys_besides(conn, key_id):
            raise Conflict(
                "this is the last key of the last admin: nobody could administer Corral without it; "
                "mint a new one first (`corral user key create NAME`), or on the manager's host "
                "replace it with `corral up --rotate-key`",
                {"field": "key_id"},
            )
        if not await users.revoke(conn, found.id, key_id):
            raise NotFound(f"no key {key_id[:80]!r} of user {name[:80]!r}", {"field": "key_id"})
        await config.audit(conn, who.name, "key.revoke", name, f"key {key_id}", now)
