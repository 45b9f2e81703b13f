"""Gang placement over a snapshot of agents: all kernels of a session, or none."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from corral.domain.resources import ResourceSlots


class PlacementStrategy(StrEnum):
    CONCENTRATED = "concentrated"
    DISPERSED = "dispersed"


@dataclass(frozen=True)
class AgentSnapshot:
    """One schedulable agent as the scheduler sees it this cycle."""

    agent_id: str
    """The agent."""
    free: ResourceSlots
    """Capacity minus live allocations (and reservations)."""


@dataclass(frozen=True)
class Placement:
    """The agent chosen for each kernel rank, in rank order."""

    agent_ids: tuple[str, ...]
    """agent_ids[rank] runs that rank's kernel."""


def _order_key(strategy: PlacementStrategy, agent: AgentSnapshot) -> tuple[object, ...]:
    # concentrated: fill the busiest agent first (least free CPU), so large gangs find room later;
    # dispersed: spread onto the emptiest agent.  Agent id breaks ties, so placement is reproducible.
    free_cpu = agent.free["cpu"]
    if strategy is PlacementStrategy.CONCENTRATED:
        return (free_cpu, agent.agent_id)
    return (-free_cpu, agent.agent_id)


def place_gang(
    kernels: Sequence[ResourceSlots],
    agents: Sequence[AgentSnapshot],
    strategy: PlacementStrategy = PlacementStrategy.CONCENTRATED,
    avoid: frozenset[str] = frozenset(),
) -> Placement | None:
    """Place every kernel or return None; `agents` is not modified."""
    free = {a.agent_id: a.free for a in agents if a.agent_id not in avoid}
    chosen: list[str] = []
    for need in kernels:
        candidates = sorted(
            (AgentSnapshot(aid, f) for aid, f in free.items() if need.fits_in(f)),
            key=lambda a: _order_key(strategy, a),
        )
        if not candidates:
            return None
        pick = candidates[0].agent_id
        free[pick] = free[pick] - need
        chosen.append(pick)
    return Placement(tuple(chosen))


def apply_placement(
    agents: Sequence[AgentSnapshot], kernels: Sequence[ResourceSlots], placement: Placement
) -> list[AgentSnapshot]:
    """The snapshot after `placement` took its capacity, for placing the next session."""
    used: dict[str, ResourceSlots] = {}
    for need, aid in zip(kernels, placement.agent_ids, strict=True):
        used[aid] = used.get(aid, ResourceSlots()) + need
    return [AgentSnapshot(a.agent_id, a.free - used.get(a.agent_id, ResourceSlots())) for a in agents]
