"""DrainRoute's rule, the clock passed in: a draining route is stopped once no manager has requests
open on it (this one's counted, another's hold on the route) and the settle time passed, or at
its drain timeout whatever is open; one that never served at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from corral.domain.deployment_records import DeploymentRecord, RouteRecord
from corral.domain.deployment_status import DeploymentStatus, Outcome, RouteStatus
from corral.domain.deployments import Rollout
from corral.domain.route_health import Health
from corral.manager.deployment_handlers.base import Context
from corral.manager.deployment_handlers.drain_route import DrainRoute

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DEP = DeploymentRecord(
    "d1", "web", "p", "ann", DeploymentStatus.SCALING, T0, 1, 1, False, Rollout(drain_timeout=30.0),
    None, False, 0, None, None, "", T0, T0,
)  # fmt: skip


def _route(status: RouteStatus = RouteStatus.HEALTHY, held: float | None = None) -> RouteRecord:
    until = None if held is None else T0 + timedelta(seconds=held)
    return RouteRecord(
        "r1", "d1", 1, "s1", status, T0, "h", 1, False, T0, until, T0, Health(), T0
    )  # fmt: skip


async def _drained(route: RouteRecord, after: float, open_here: int = 0) -> bool:
    now = T0 + timedelta(seconds=after)
    ctx = Context(None, now, {"d1": DEP}, {"d1": [route]}, {}, {}, {"r1": open_here} if open_here else {})  # type: ignore[arg-type]
    got: dict[str, Any] = await DrainRoute().execute(ctx, [route])
    return "r1" in got and got["r1"].outcome is Outcome.SUCCESS


async def test_a_drain_waits_for_the_settle_time_and_open_requests_here() -> None:
    assert not await _drained(_route(), 1.0)
    assert await _drained(_route(), 2.0)
    assert not await _drained(_route(), 10.0, open_here=2)
    assert await _drained(_route(), 30.0, open_here=2)  # the drain timeout, whatever is open


async def test_another_managers_hold_is_waited_for_up_to_the_timeout() -> None:
    assert not await _drained(_route(held=12.0), 10.0)
    assert await _drained(_route(held=12.0), 13.0)
    assert await _drained(_route(held=99.0), 30.0)


async def test_a_route_that_never_served_drains_at_once() -> None:
    assert await _drained(_route(RouteStatus.PROVISIONING, held=99.0), 0.0)
