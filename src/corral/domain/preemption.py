"""Priority preemption (DESIGN §6): which running sessions make room for a waiting one -- pure, over
a snapshot, the clock passed in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from corral.domain.capacity import FreeCapacity
from corral.domain.placement import AgentSnapshot, PlacementStrategy
from corral.domain.resources import ResourceSlots


class PreemptionOrder(StrEnum):
    OLDEST = "oldest"
    NEWEST = "newest"


class PreemptionMode(StrEnum):
    TERMINATE = "terminate"
    SUSPEND = "suspend"


@dataclass(frozen=True)
class GroupSettings:
    """A resource group's preemption settings."""

    preemptible_priority: int = 5
    """Only sessions at or below this priority may be preempted."""
    preemption_order: PreemptionOrder = PreemptionOrder.OLDEST
    """Among victims of one priority, which go first (by start time)."""
    preemption_mode: PreemptionMode = PreemptionMode.TERMINATE
    """terminate (requeued by the retry engine) or suspend."""
    grace_period: float = 30.0
    """Seconds between a victim's SIGTERM and its SIGKILL."""
    min_runtime: float = 0.0
    """A session younger than this (seconds since it started) is never a victim."""

    def to_json(self) -> dict[str, Any]:
        return {
            "preemptible_priority": self.preemptible_priority,
            "preemption_order": str(self.preemption_order),
            "preemption_mode": str(self.preemption_mode),
            "grace_period": self.grace_period,
            "min_runtime": self.min_runtime,
        }


def group_settings(raw: Mapping[str, Any] | None) -> GroupSettings:
    """The stored config over the defaults (validated by the API when it was set)."""
    given = {f.name: raw[f.name] for f in fields(GroupSettings) if raw and raw.get(f.name) is not None}
    if "preemption_order" in given:
        given["preemption_order"] = PreemptionOrder(given["preemption_order"])
    if "preemption_mode" in given:
        given["preemption_mode"] = PreemptionMode(given["preemption_mode"])
    return replace(GroupSettings(), **given)


@dataclass(frozen=True)
class RunningSession:
    """A running session as a possible victim."""

    session_id: str
    """The session."""
    priority: int
    """Its priority."""
    started_at: datetime
    """When it started running."""
    kernels: tuple[tuple[str, ResourceSlots], ...]
    """(agent, slots) of each of its kernels: what preempting it frees."""


def candidates(
    running: Sequence[RunningSession], preemptor_priority: int, s: GroupSettings, now: datetime
) -> list[RunningSession]:
    """Sessions that may be preempted for this priority, in victim order: lowest priority first,
    then by start time (oldest or newest first), then id."""
    allowed = [
        r
        for r in running
        if r.priority <= s.preemptible_priority
        and r.priority < preemptor_priority
        and now - r.started_at >= timedelta(seconds=s.min_runtime)
    ]
    newest = s.preemption_order is PreemptionOrder.NEWEST
    return sorted(
        allowed,
        key=lambda r: (
            r.priority,
            -r.started_at.timestamp() if newest else r.started_at.timestamp(),
            r.session_id,
        ),
    )


def freed(agents: Sequence[AgentSnapshot], victims: Sequence[RunningSession]) -> list[AgentSnapshot]:
    extra: dict[str, ResourceSlots] = {}
    for v in victims:
        for agent_id, slots in v.kernels:
            extra[agent_id] = extra.get(agent_id, ResourceSlots()) + slots
    return [AgentSnapshot(a.agent_id, a.free + extra.get(a.agent_id, ResourceSlots())) for a in agents]


def choose_victims(
    needs: Sequence[ResourceSlots],
    strategy: PlacementStrategy,
    agents: Sequence[AgentSnapshot],
    ordered: Sequence[RunningSession],
) -> list[RunningSession] | None:
    """A minimal set of victims (in victim order) whose release lets the gang be placed, or None when
    even all of them would not: greedy in victim order, then a reverse pass drops every victim whose
    release is not needed.  Each step updates one capacity index (no re-sorting of every agent per
    victim tried), with the choices `place_gang` would make."""
    free = FreeCapacity(agents)
    chosen: list[RunningSession] = []
    for victim in ordered:
        chosen.append(victim)
        free.release(victim.kernels)
        if free.place(needs, strategy) is not None:
            break
    else:
        return None
    for victim in reversed(list(chosen)):
        free.occupy(victim.kernels)
        if free.place(needs, strategy) is not None:
            chosen = [v for v in chosen if v is not victim]
        else:
            free.release(victim.kernels)
    return chosen
