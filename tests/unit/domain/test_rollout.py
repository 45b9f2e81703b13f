"""Rollout planning: a simulated rolling update never drops below its floor nor exceeds its
surge, and ends with `replicas` HEALTHY routes of the new revision; scale-down order."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.domain.deployment_status import RouteStatus as R
from corral.domain.deployments import Budget, Rollout
from corral.domain.rollout import RouteView, plan, replace_delay

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def route(i: int, revision: int = 1, status: R = R.HEALTHY) -> RouteView:
    return RouteView(f"r{i}", revision, status, T0 + timedelta(seconds=i))


def test_scale_up_adds_the_missing_replicas() -> None:
    assert plan([route(1)], replicas=4, revision=1, surge=1, unavailable=1).add == 3


def test_scale_down_removes_non_healthy_first_then_the_newest() -> None:
    routes = [route(1), route(2), route(3, status=R.UNHEALTHY), route(4), route(5, status=R.PROVISIONING)]
    assert plan(routes, replicas=2, revision=1, surge=1, unavailable=0).drain == ("r5", "r3", "r4")


def test_draining_and_ended_routes_are_not_counted() -> None:
    routes = [route(1), replace(route(2), draining=True), route(3, status=R.TERMINATED)]
    assert plan(routes, replicas=3, revision=1, surge=1, unavailable=0).add == 2


def test_with_a_surge_old_routes_drain_only_once_new_ones_are_healthy() -> None:
    old = [route(i) for i in range(3)]
    first = plan(old, replicas=3, revision=2, surge=1, unavailable=0)
    assert first == type(first)(add=1, drain=())
    starting = [*old, route(9, revision=2, status=R.PROVISIONING)]
    assert plan(starting, 3, 2, surge=1, unavailable=0).drain == ()
    up = [*old, route(9, revision=2)]
    assert plan(up, 3, 2, surge=1, unavailable=0).drain == ("r0",)


def test_old_routes_out_of_service_drain_at_once() -> None:
    routes = [route(0), route(1, status=R.UNHEALTHY), route(2)]
    assert "r1" in plan(routes, 3, 2, surge=1, unavailable=0).drain


def test_a_stalled_rollout_keeps_the_old_routes_and_stops_the_new() -> None:
    routes = [route(0), route(1), route(5, revision=2, status=R.PROVISIONING), route(6, revision=2)]
    got = plan(routes, 2, 2, surge=1, unavailable=0, stalled=True)
    assert got.add == 0 and got.drain == ("r5",)


def test_limits_round_like_kubernetes() -> None:
    assert Rollout().limits(3) == (1, 0)
    assert Rollout().limits(10) == (3, 2)
    assert Rollout(max_surge=Budget(0), max_unavailable=Budget(10, True)).limits(3) == (0, 1)
    assert Rollout(max_surge=Budget(2), max_unavailable=Budget(1)).limits(5) == (2, 1)


def test_replacement_backoff_doubles_to_five_minutes() -> None:
    assert [replace_delay(n) for n in range(5)] == [0.0, 1.0, 2.0, 4.0, 8.0]
    assert replace_delay(50) == 300.0


@settings(max_examples=300, deadline=None)
@given(
    replicas=st.integers(1, 8),
    surge=st.integers(0, 4),
    unavailable=st.integers(0, 4),
    slow=st.lists(st.booleans(), min_size=1, max_size=20),
)
def test_a_rolling_update_keeps_its_bounds_and_completes(
    replicas: int, surge: int, unavailable: int, slow: list[bool]
) -> None:
    """Each step applies the plan; a new route becomes HEALTHY one step after it was added, or two
    if `slow` says so; drained routes are gone the next step."""
    if surge == 0 and unavailable == 0:
        unavailable = 1  # what Rollout.limits makes of it
    floor = replicas if surge else replicas - unavailable
    routes = [route(i) for i in range(replicas)]
    n = replicas
    born: dict[str, int] = {}
    for step in range(200):
        got = plan(routes, replicas, revision=2, surge=surge, unavailable=unavailable)
        routes = [r for r in routes if r.id not in got.drain]
        healthy = sum(r.status is R.HEALTHY for r in routes)
        assert healthy >= min(floor, replicas), (step, routes)
        routes = [
            replace(r, status=R.HEALTHY)
            if step - born.get(r.id, step) > slow[int(r.id[1:]) % len(slow)]
            else r
            for r in routes
        ]
        for _ in range(got.add):
            n += 1
            routes.append(route(n, revision=2, status=R.PROVISIONING))
            born[f"r{n}"] = step
        assert len(routes) <= replicas + surge
        if len(routes) == replicas and all(r.revision == 2 and r.status is R.HEALTHY for r in routes):
            return
    raise AssertionError(f"the rollout did not complete: {routes}")
