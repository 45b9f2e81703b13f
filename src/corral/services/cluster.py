"""Cluster settings (DESIGN §5 "Pinned details"): stored in the database, changeable at runtime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from corral.domain.failure import DEFAULT_CATEGORIES, CategoryRule, categories_from
from corral.domain.policy import PolicyError
from corral.domain.retry import ClusterRetry
from corral.domain.spec import RetryPolicy
from corral.services.errors import InvalidInput
from corral.store import config
from corral.store.auth import Principal
from corral.store.db import transaction
from corral.store.records import AuditRecord

# Every setting, with its default; the API and CLI use these dotted names.
DEFAULTS: dict[str, Any] = {
    "retry.enabled": True,
    "retry.global_max_retries": 20,
    "retry.dispatch_rate": None,
    "retry.defaults": {},
    "failure_categories": [dict(c) for c in DEFAULT_CATEGORIES],
}


@dataclass(frozen=True)
class ClusterSettings:
    """The cluster's settings as the engine uses them."""

    retry: ClusterRetry = field(default_factory=ClusterRetry)
    """Kill switch, global cap, storm guard."""
    retry_defaults: Mapping[str, Any] = field(default_factory=dict)
    """Inline policy fields every session gets unless its project or itself says otherwise."""
    categories: tuple[CategoryRule, ...] = ()
    """Operator failure-category rules, in order."""


def values_of(stored: Mapping[str, Any]) -> dict[str, Any]:
    return {key: stored.get(key, default) for key, default in DEFAULTS.items()}


def nested(values: Mapping[str, Any]) -> dict[str, Any]:
    """{"retry.enabled": x} -> {"retry": {"enabled": x}} (the JSON the API shows)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        head, _, tail = key.partition(".")
        if tail:
            out.setdefault(head, {})[tail] = value
        else:
            out[head] = value
    return out


def settings_of(values: Mapping[str, Any]) -> ClusterSettings:
    """Typed settings; a value that cannot be used raises PolicyError naming it (a database edited
    by hand must stop the manager with one line, never make it guess)."""
    rate = values["retry.dispatch_rate"]
    try:
        retry = ClusterRetry(
            enabled=_typed(values, "retry.enabled", bool),
            global_max_retries=_typed(values, "retry.global_max_retries", int),
            dispatch_rate=float(_typed(values, "retry.dispatch_rate", (int, float))) if rate else None,
        )
        defaults = _typed(values, "retry.defaults", dict)
        RetryPolicy.from_json(defaults)
    except (TypeError, ValueError) as exc:
        raise PolicyError("retry.defaults", f"cannot be used: {exc}") from None
    rules = _typed(values, "failure_categories", list)
    return ClusterSettings(retry=retry, retry_defaults=defaults, categories=categories_from(rules))


def _typed(values: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = values[key]
    if value is None and key == "retry.dispatch_rate":
        return value
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise PolicyError(key, f"{value!r} is not a valid value"[:200])
    return value


async def load(conn: AsyncConnection) -> ClusterSettings:
    return settings_of(values_of(await config.cluster_values(conn)))


class StartupError(Exception):
    """The stored settings cannot be used: the manager does not start (the message names why)."""


async def check_at_start(engine: AsyncEngine) -> None:
    """Refuse to start on settings that cannot be used, naming the rule (never a silent default)."""
    async with engine.connect() as conn:
        try:
            await load(conn)
        except PolicyError as exc:
            raise StartupError(f"cluster config {exc.field}: {exc}") from None


async def current(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        return nested(values_of(await config.cluster_values(conn)))


async def change(engine: AsyncEngine, who: Principal, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Apply already type-checked changes (dotted keys) after checking they make sense together."""
    now = datetime.now(UTC)
    async with transaction(engine) as conn:
        values = values_of(await config.cluster_values(conn))
        changes = dict(changes)
        if "retry.defaults" in changes:  # a merge (JSON merge-patch style): null clears
            given = changes["retry.defaults"]
            changes["retry.defaults"] = {} if given is None else {**values["retry.defaults"], **given}
        values.update(changes)
        try:
            settings_of(values)
        except PolicyError as exc:
            raise InvalidInput(exc.field, str(exc)) from None
        await config.set_cluster_values(conn, changes, now)
        for key, value in sorted(changes.items()):
            await config.audit(conn, who.name, "config.set", key, f"set to {_short(value)}", now)
    return nested(values)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


async def audit(engine: AsyncEngine, after: int, limit: int, action: str | None) -> list[AuditRecord]:
    async with engine.connect() as conn:
        return await config.audit_rows(conn, after, limit, action)
