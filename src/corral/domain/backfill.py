"""No starvation (DESIGN §6): the first waiting session that does not fit holds the agents it will
run on; a later session may use them only when its `timeout` proves it ends before the hold
starts.  Pure, over a snapshot, the clock passed in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from corral.domain.placement import AgentSnapshot, PlacementStrategy, place_gang
from corral.domain.resources import ResourceSlots


@dataclass(frozen=True)
class Occupant:
    """Something running on agents, and when it will certainly have ended."""

    agent_ids: frozenset[str]
    """The agents its kernels run on."""
    ends_by: datetime | None
    """Its start plus its timeout; None when nothing bounds it."""


@dataclass(frozen=True)
class Hold:
    """Agents held for the head of the queue."""

    session_id: str
    """Who they are held for."""
    agent_ids: frozenset[str]
    """The agents it will run on once they have room."""
    starts_by: datetime | None
    """When they will certainly have room (every occupant's bound); None when unknown."""


def head_hold(
    session_id: str,
    needs: Sequence[ResourceSlots],
    strategy: PlacementStrategy,
    capacity: Sequence[AgentSnapshot],
    occupants: Sequence[Occupant],
    now: datetime,
) -> Hold | None:
    """The hold for a session that does not fit now: the agents its gang would take on an empty
    cluster (None when even that cannot hold it: it holds nothing, it would wait for ever)."""
    target = place_gang(needs, capacity, strategy)
    if target is None:
        return None
    agents = frozenset(target.agent_ids)
    bounds = [o.ends_by for o in occupants if o.agent_ids & agents]
    starts_by = None if any(b is None for b in bounds) else max([now, *(b for b in bounds if b)])
    return Hold(session_id, agents, starts_by)


def may_use_held(hold: Hold, timeout: int | None, now: datetime) -> bool:
    """A later session may run on held agents only if its timeout ends it before the hold starts."""
    if hold.starts_by is None or timeout is None:
        return False
    return now + timedelta(seconds=timeout) <= hold.starts_by
