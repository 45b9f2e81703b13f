"""Victim choice (DESIGN §6): who may be preempted, in what order, and a minimal set that fits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.domain.placement import AgentSnapshot, PlacementStrategy, place_gang
from corral.domain.preemption import (
    GroupSettings,
    PreemptionOrder,
    RunningSession,
    candidates,
    choose_victims,
    freed,
    group_settings,
)
from corral.domain.resources import ResourceSlots

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)


def cpu(n: float) -> ResourceSlots:
    return ResourceSlots.parse({"cpu": n})


def run(sid: str, priority: int, started_min: int, *kernels: tuple[str, float]) -> RunningSession:
    return RunningSession(
        sid, priority, T0 + timedelta(minutes=started_min), tuple((a, cpu(c)) for a, c in kernels)
    )


def test_who_may_be_preempted() -> None:
    running = [
        run("low-old", 1, 0, ("a", 1)),
        run("low-new", 1, 30, ("a", 1)),
        run("five", 5, 0, ("a", 1)),
        run("six", 6, 0, ("a", 1)),  # above preemptible_priority
        run("young", 1, 59, ("a", 1)),
    ]
    s = GroupSettings(preemptible_priority=5, min_runtime=120)
    assert [r.session_id for r in candidates(running, 50, s, NOW)] == ["low-old", "low-new", "five"]
    newest = GroupSettings(preemption_order=PreemptionOrder.NEWEST, min_runtime=120)
    assert [r.session_id for r in candidates(running, 50, newest, NOW)] == ["low-new", "low-old", "five"]
    # Never one of equal or higher priority than the preemptor.
    assert [r.session_id for r in candidates(running, 5, s, NOW)] == ["low-old", "low-new"]
    assert candidates(running, 1, s, NOW) == []


def test_minimal_victims_for_a_whole_agent() -> None:
    agents = [AgentSnapshot("a", cpu(0)), AgentSnapshot("b", cpu(0))]
    running = [run(f"s{i}", 1, i, ("a" if i % 2 == 0 else "b", 1)) for i in range(8)]
    ordered = candidates(running, 50, GroupSettings(), NOW)
    victims = choose_victims([cpu(4)], PlacementStrategy.CONCENTRATED, agents, ordered)
    assert victims is not None
    # Greedy takes s0..s6 (a fills at s6); the reverse pass drops b's sessions: a's four remain.
    assert [v.session_id for v in victims] == ["s0", "s2", "s4", "s6"]


def test_not_enough_to_free_gives_none() -> None:
    agents = [AgentSnapshot("a", cpu(0))]
    ordered = [run("x", 1, 0, ("a", 1))]
    assert choose_victims([cpu(2)], PlacementStrategy.CONCENTRATED, agents, ordered) is None


def test_stored_settings_over_defaults() -> None:
    s = group_settings({"preemption": None, "grace_period": 2, "preemption_order": "newest"})
    assert (s.grace_period, s.preemption_order, s.preemptible_priority) == (2, PreemptionOrder.NEWEST, 5)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.integers(1, 4), st.integers(1, 5)), min_size=1, max_size=10
    ),
    st.lists(st.integers(0, 4), min_size=3, max_size=3),
    st.integers(1, 8),
    st.integers(1, 3),
)
def test_victims_make_room_and_none_is_spare(
    sessions: list[tuple[str, int, int]], free: list[int], need: int, size: int
) -> None:
    agents = [AgentSnapshot(a, cpu(f)) for a, f in zip("abc", free, strict=True)]
    running = [run(f"s{i}", p, i, (a, c)) for i, (a, c, p) in enumerate(sessions)]
    ordered = candidates(running, 50, GroupSettings(), NOW)
    needs = [cpu(need)] * size
    victims = choose_victims(needs, PlacementStrategy.CONCENTRATED, agents, ordered)
    everything = place_gang(needs, freed(agents, ordered), PlacementStrategy.CONCENTRATED)
    if victims is None:
        assert everything is None
        return
    assert place_gang(needs, freed(agents, victims), PlacementStrategy.CONCENTRATED) is not None
    for spare in victims:
        rest = [v for v in victims if v is not spare]
        assert place_gang(needs, freed(agents, rest), PlacementStrategy.CONCENTRATED) is None


def reference_victims(
    needs: list[ResourceSlots], agents: list[AgentSnapshot], ordered: list[RunningSession]
) -> list[RunningSession] | None:
    """The rule as DESIGN §6 states it, by full re-placement at every step (slow, obviously right)."""
    chosen: list[RunningSession] = []
    for victim in ordered:
        chosen.append(victim)
        if place_gang(needs, freed(agents, chosen)) is not None:
            break
    else:
        return None
    for victim in reversed(list(chosen)):
        without = [v for v in chosen if v is not victim]
        if place_gang(needs, freed(agents, without)) is not None:
            chosen = without
    return chosen


@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from("abcd"), min_size=1, max_size=3), st.integers(1, 4), st.integers(1, 5)
        ),
        max_size=12,
    ),
    st.lists(st.integers(0, 4), min_size=3, max_size=3),
    st.integers(1, 8),
    st.integers(1, 3),
)
def test_the_incremental_search_chooses_what_the_rule_chooses(
    sessions: list[tuple[list[str], int, int]], free: list[int], need: int, size: int
) -> None:
    # Agent "d" runs victims but is not in the view (held for another preemptor): freeing it is no use.
    agents = [AgentSnapshot(a, cpu(f)) for a, f in zip("abc", free, strict=True)]
    running = [run(f"s{i}", p, i, *[(a, c) for a in on]) for i, (on, c, p) in enumerate(sessions)]
    ordered = candidates(running, 50, GroupSettings(), NOW)
    needs = [cpu(need)] * size
    assert choose_victims(needs, PlacementStrategy.CONCENTRATED, agents, ordered) == reference_victims(
        needs, agents, ordered
    )
