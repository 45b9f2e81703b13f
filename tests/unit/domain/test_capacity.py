"""The cycle's in-memory capacity index places exactly as the reference `place_gang` does, over a
whole cycle of placements, exclusions and slots other than CPU (so the speed-up changes nothing)."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from corral.domain.capacity import FreeCapacity
from corral.domain.placement import AgentSnapshot, PlacementStrategy, apply_placement, place_gang
from corral.domain.resources import ResourceSlots


def slots(cpu: float, mem: int = 0) -> ResourceSlots:
    return ResourceSlots({"cpu": Decimal(str(cpu)), "mem": Decimal(mem)})


agent_st = st.tuples(st.sampled_from([-1, 0, 0.5, 1, 2, 4, 8]), st.integers(min_value=0, max_value=4))
agents_st = st.lists(agent_st, min_size=0, max_size=8).map(
    lambda caps: [AgentSnapshot(f"n{i}", slots(c, m)) for i, (c, m) in enumerate(caps)]
)
gang_st = st.tuples(
    st.sampled_from([0, 0.5, 1, 2, 3]), st.integers(min_value=0, max_value=2), st.integers(1, 3)
).map(lambda t: [slots(t[0], t[1])] * t[2])
request_st = st.tuples(gang_st, st.sampled_from(list(PlacementStrategy)), st.sets(st.integers(0, 7)))


@given(agents_st, st.lists(request_st, max_size=12))
def test_same_choices_as_place_gang_over_a_cycle(
    agents: list[AgentSnapshot],
    requests: list[tuple[list[ResourceSlots], PlacementStrategy, set[int]]],
) -> None:
    free = FreeCapacity(agents)
    reference = list(agents)
    for gang, strategy, excluded_idx in requests:
        excluded = frozenset(f"n{i}" for i in excluded_idx)
        expected = place_gang(gang, reference, strategy, avoid=excluded)
        got = free.place(gang, strategy, excluded)
        assert got == expected
        if got is not None:
            free.take(gang, got)
            reference = apply_placement(reference, gang, got)
        assert free.snapshot() == sorted(reference, key=lambda a: a.agent_id)
        # What placement reads the queue by: the CPU free, an overcommitted agent counting none.
        assert free.cpu_free() == sum((max(a.free["cpu"], Decimal(0)) for a in reference), Decimal(0))


def test_place_takes_nothing_until_told() -> None:
    free = FreeCapacity([AgentSnapshot("a", slots(2))])
    gang = [slots(1), slots(1)]
    placed = free.place(gang)
    assert placed is not None and placed.agent_ids == ("a", "a")
    assert free.place(gang) == placed  # asking again finds the same room
    free.take(gang, placed)
    assert free.place([slots(1)]) is None


def test_a_gang_that_does_not_fit_leaves_the_snapshot_as_it_was() -> None:
    free = FreeCapacity([AgentSnapshot("a", slots(2)), AgentSnapshot("b", slots(1))])
    assert free.place([slots(2), slots(2)]) is None
    assert free.snapshot() == [AgentSnapshot("a", slots(2)), AgentSnapshot("b", slots(1))]
