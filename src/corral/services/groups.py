"""Resource groups' preemption and queue settings (admin)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.clock import utcnow
from corral.domain.preemption import group_settings
from corral.domain.records import Principal
from corral.services.errors import NotFound
from corral.store import agents, config, preemption
from corral.store.db import reading, transaction
from corral.store.unit import Engine

# Stored under "queue": the coordinator's limits for the group (None: the manager's setting).
QUEUE_KEYS = ("pending_timeout", "max_reschedules")


def _view(name: str, cfg: Mapping[str, Any], members: list[str]) -> dict[str, Any]:
    queue = cfg.get("queue") or {}
    return {
        "name": name,
        **group_settings(cfg.get("preemption")).to_json(),
        **{k: queue.get(k) for k in QUEUE_KEYS},
        "agents": members,
    }


async def listed(engine: Engine) -> list[dict[str, Any]]:
    async with reading(engine) as conn:
        found = await preemption.groups(conn)
        members = await agents.list_agents(conn)
    return [
        _view(name, cfg, sorted(a.id for a in members if a.resource_group == name)) for name, cfg in found
    ]


async def get(engine: Engine, name: str) -> dict[str, Any]:
    found = [g for g in await listed(engine) if g["name"] == name]
    if not found:
        raise NotFound(f"no resource group {name[:80]!r}", {"field": "name"})
    return found[0]


async def update(engine: Engine, who: Principal, name: str, changes: Mapping[str, Any]) -> dict[str, Any]:
    now = utcnow()
    async with transaction(engine) as conn:
        cfg = await preemption.group_config(conn, name)
        if cfg is None:
            raise NotFound(f"no resource group {name[:80]!r}", {"field": "name"})
        queue = {k: v for k, v in changes.items() if k in QUEUE_KEYS}
        cfg["preemption"] = {
            **cfg.get("preemption", {}),
            **{k: v for k, v in changes.items() if k not in queue},
        }
        cfg["queue"] = {**cfg.get("queue", {}), **queue}
        await preemption.set_group_config(conn, name, cfg)
        what = ", ".join(f"{k}={v}" for k, v in sorted(changes.items())) or "nothing"
        await config.audit(conn, who.name, "resource_group.update", name, what, now)
    return await get(engine, name)
