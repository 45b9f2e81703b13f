"""Gang placement is all-or-nothing, never oversubscribes, and is reproducible."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from corral.domain.placement import AgentSnapshot, PlacementStrategy, apply_placement, place_gang
from corral.domain.resources import ResourceSlots


def cpu(n: float) -> ResourceSlots:
    return ResourceSlots({"cpu": Decimal(str(n))})


def test_concentrated_fills_one_agent_first() -> None:
    agents = [AgentSnapshot("a", cpu(4)), AgentSnapshot("b", cpu(4))]
    placed = place_gang([cpu(1), cpu(1)], agents, PlacementStrategy.CONCENTRATED)
    assert placed is not None and placed.agent_ids == ("a", "a")


def test_dispersed_spreads() -> None:
    agents = [AgentSnapshot("a", cpu(4)), AgentSnapshot("b", cpu(4))]
    placed = place_gang([cpu(1), cpu(1)], agents, PlacementStrategy.DISPERSED)
    assert placed is not None and sorted(placed.agent_ids) == ["a", "b"]


def test_gang_that_does_not_fit_places_nothing() -> None:
    agents = [AgentSnapshot("a", cpu(2)), AgentSnapshot("b", cpu(1))]
    assert place_gang([cpu(2), cpu(2)], agents) is None


def test_avoided_agents_are_not_used() -> None:
    agents = [AgentSnapshot("a", cpu(2)), AgentSnapshot("b", cpu(2))]
    placed = place_gang([cpu(1)], agents, avoid=frozenset({"a"}))
    assert placed is not None and placed.agent_ids == ("b",)


agents_st = st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=5).map(
    lambda caps: [AgentSnapshot(f"n{i}", cpu(c)) for i, c in enumerate(caps)]
)
gang_st = st.lists(st.sampled_from([0.5, 1, 2, 3]), min_size=1, max_size=6).map(
    lambda xs: [cpu(x) for x in xs]
)


@given(agents_st, gang_st, st.sampled_from(list(PlacementStrategy)))
def test_placement_never_oversubscribes(
    agents: list[AgentSnapshot], gang: list[ResourceSlots], strategy: PlacementStrategy
) -> None:
    placed = place_gang(gang, agents, strategy)
    if placed is None:
        # Greedy may miss a clever packing, but never one where a single agent holds the whole gang.
        assert not any(sum((g["cpu"] for g in gang), Decimal(0)) <= a.free["cpu"] for a in agents)
        return
    after = apply_placement(agents, gang, placed)
    assert all(a.free["cpu"] >= 0 for a in after)
    assert len(placed.agent_ids) == len(gang)
    assert place_gang(gang, agents, strategy) == placed  # reproducible
