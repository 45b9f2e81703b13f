"""The no-starvation hold: which agents the first session in line holds, and who may still use them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from corral.domain.backfill import Occupant, head_hold, may_use_held
from corral.domain.placement import AgentSnapshot, PlacementStrategy
from corral.domain.resources import ResourceSlots

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CAP = [
    AgentSnapshot("a", ResourceSlots.parse({"cpu": 2})),
    AgentSnapshot("b", ResourceSlots.parse({"cpu": 2})),
]


def cpu(n: float) -> ResourceSlots:
    return ResourceSlots.parse({"cpu": n})


def test_the_hold_starts_when_every_occupant_is_bound_to_end() -> None:
    occupants = [
        Occupant(frozenset({"a"}), NOW + timedelta(seconds=30)),
        Occupant(frozenset({"b"}), NOW + timedelta(seconds=60)),
    ]
    hold = head_hold("big", [cpu(2), cpu(2)], PlacementStrategy.CONCENTRATED, CAP, occupants, NOW)
    assert hold is not None and hold.agent_ids == {"a", "b"}
    assert hold.starts_by == NOW + timedelta(seconds=60)
    assert may_use_held(hold, 60, NOW) and not may_use_held(hold, 61, NOW)
    assert not may_use_held(hold, None, NOW)  # no timeout proves nothing


def test_an_unbounded_occupant_means_nobody_else_may_use_the_held_agents() -> None:
    occupants = [Occupant(frozenset({"a"}), None)]
    hold = head_hold("big", [cpu(2)], PlacementStrategy.CONCENTRATED, CAP, occupants, NOW)
    assert hold is not None and hold.agent_ids == {"a"} and hold.starts_by is None
    assert not may_use_held(hold, 1, NOW)


def test_a_session_bigger_than_the_cluster_holds_nothing() -> None:
    assert head_hold("huge", [cpu(2)] * 3, PlacementStrategy.CONCENTRATED, CAP, [], NOW) is None


def test_only_occupants_of_the_held_agents_count() -> None:
    occupants = [Occupant(frozenset({"b"}), None), Occupant(frozenset({"a"}), NOW + timedelta(seconds=5))]
    hold = head_hold("one", [cpu(2)], PlacementStrategy.CONCENTRATED, CAP, occupants, NOW)
    assert hold is not None and hold.agent_ids == {"a"} and hold.starts_by == NOW + timedelta(seconds=5)
