"""Why a pending session waits, in the words a person needs: where it is in its group's queue,
what it needs against the largest free slot on one agent, and whether it can ever start.

The rules.  A session is *infeasible* when some kernel fits no agent of its group by capacity
(what is in use ignored), or when its gang asks for more than the group's agents have in all;
a group with no live agent is "waiting for agents", not infeasible (agents may come).  Otherwise
it waits: for a retry's delay, for a preemptor's hold, or for its turn and for room.  Pure: the
clock is passed in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from corral.domain.records import AgentRecord, SessionRecord
from corral.domain.resources import ResourceSlots
from corral.domain.status import AgentStatus


@dataclass(frozen=True)
class Waiting:
    position: int
    """1 for the head of its group's queue"""
    reason: str
    infeasible: bool
    needs: ResourceSlots
    """what one kernel asks for (the gang: this times cluster_size)"""
    largest_free: ResourceSlots | None
    """the most that is free on one live agent of its group now (None: no live agent)"""


def _largest(slots: Sequence[ResourceSlots], needs: ResourceSlots) -> ResourceSlots | None:
    """The slot that comes nearest to `needs`: the most of each asked-for resource, in order."""
    if not slots:
        return None
    keys = sorted(needs.amounts) or ["cpu"]
    return max(slots, key=lambda free: tuple(free[k] for k in keys))


def explain(
    s: SessionRecord, position: int, agents: Sequence[AgentRecord], now: datetime, hold: str | None = None
) -> Waiting:
    """`position`: its place in its group's queue; `agents`: its group's; `hold`: a preemptor's
    reservation it waits behind, if any."""
    needs = s.resources
    live = [a for a in agents if a.status is AgentStatus.ALIVE]
    largest = _largest([a.capacity - a.used for a in live], needs)
    size = s.cluster_size
    fits_somewhere = any(needs.fits_in(a.capacity) for a in agents)
    total = ResourceSlots()
    for a in agents:
        total = total + a.capacity
    group = s.spec.resource_group
    if agents and not fits_somewhere:
        return Waiting(
            position, f"infeasible: no agent of {group} is big enough for one kernel", True, needs, largest
        )
    if agents and not needs.times(size).fits_in(total):
        reason = f"infeasible: the {size} kernels need more than all of {group}'s agents have"
        return Waiting(position, reason, True, needs, largest)
    if not live:
        return Waiting(position, f"waiting for agents: {group} has no live agent", False, needs, largest)
    if s.retry_after is not None and s.retry_after > now:
        seconds = (s.retry_after - now).total_seconds()
        return Waiting(
            position, f"a retry's delay: not before {seconds:.0f} s from now", False, needs, largest
        )
    if hold:
        return Waiting(position, f"held: {hold}", False, needs, largest)
    if position > 1:
        return Waiting(position, f"in line: {position - 1} ahead of it in {group}", False, needs, largest)
    room = largest is not None and needs.fits_in(largest)
    reason = (
        "next in line, starting as soon as the scheduler runs" if room else "next in line: waiting for room"
    )
    return Waiting(position, reason, False, needs, largest)
