"""Cluster settings (DESIGN §5 "Pinned details"): stored in the database, changeable at runtime."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.clock import utcnow
from corral.domain.cluster import nested, settings_of, values_of
from corral.domain.policy import PolicyError
from corral.domain.records import AuditRecord, Principal
from corral.services.errors import InvalidInput
from corral.store import config
from corral.store.db import reading, transaction
from corral.store.unit import Engine


class StartupError(Exception):
    """The stored settings cannot be used: the manager does not start (the message names why)."""


async def check_at_start(engine: Engine) -> None:
    """Refuse to start on settings that cannot be used, naming the rule (never a silent default)."""
    async with reading(engine) as conn:
        try:
            await config.cluster_settings(conn)
        except PolicyError as exc:
            raise StartupError(f"cluster config {exc.field}: {exc}") from None


async def current(engine: Engine) -> dict[str, Any]:
    async with reading(engine) as conn:
        return nested(values_of(await config.cluster_values(conn)))


async def change(engine: Engine, who: Principal, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Apply already type-checked changes (dotted keys) after checking they make sense together."""
    now = utcnow()
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
        named = changes.get("retry.default_policy")
        if named is not None and not await config.policies(conn, [named]):
            raise InvalidInput("retry.default_policy", f"no retry policy {named[:80]!r} (corral policy list)")
        await config.set_cluster_values(conn, changes, now)
        for key, value in sorted(changes.items()):
            await config.audit(conn, who.name, "config.set", key, f"set to {_short(value)}", now)
    return nested(values)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


async def audit(engine: Engine, after: int, limit: int, action: str | None) -> list[AuditRecord]:
    async with reading(engine) as conn:
        return await config.audit_rows(conn, after, limit, action)
