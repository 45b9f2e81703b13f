"""Each deployment and route handler declares exactly its rows of the tables (domain/
deployment_status): every move it can make is an allowed pair, from a status it targets, and
every row of the tables is some handler's."""

from __future__ import annotations

from enum import StrEnum

from corral.domain.deployment_status import (
    DEPLOYMENT_ROWS,
    ROUTE_ROWS,
    Outcome,
    deployment_move_allowed,
    route_move_allowed,
)
from corral.domain.deployment_status import DeploymentStatus as D
from corral.domain.deployment_status import RouteStatus as R
from corral.manager.deployment_handlers import RouteHandler, cycle_handlers


def _declared() -> set[tuple[str, StrEnum, StrEnum]]:
    rows: set[tuple[str, StrEnum, StrEnum]] = set()
    for h in cycle_handlers():
        moves = h.status_transitions()
        for src in h.target_statuses:
            for outcome in Outcome:
                dst = moves.to(outcome)
                if dst is not None and dst != src:
                    rows.add((h.name, src, dst))
    return rows


def test_every_declared_move_is_a_row_of_its_handler() -> None:
    table = set(DEPLOYMENT_ROWS) | set(ROUTE_ROWS)
    assert _declared() == table


def test_declared_moves_are_allowed_pairs_of_the_right_entity() -> None:
    for h in cycle_handlers():
        moves = h.status_transitions()
        for src in h.target_statuses:
            for outcome in Outcome:
                dst = moves.to(outcome)
                if dst is None or dst == src:
                    continue
                if isinstance(h, RouteHandler):
                    assert route_move_allowed(R(src), R(dst)), (h.name, src, dst)
                else:
                    assert deployment_move_allowed(D(src), D(dst)), (h.name, src, dst)


def test_the_spec_rows_are_declared_as_written() -> None:
    by_name = {h.name: h for h in cycle_handlers()}
    t = {name: h.status_transitions() for name, h in by_name.items()}
    assert (t["ProvisioningRoute"].success, t["ProvisioningRoute"].failure) == (R.DEGRADED, R.FAILED_TO_START)
    assert (t["HealthCheckRoute"].success, t["HealthCheckRoute"].failure, t["HealthCheckRoute"].stale) == (
        R.HEALTHY,
        R.UNHEALTHY,
        R.DEGRADED,
    )
    assert (t["RunningRoute"].success, t["RunningRoute"].failure) == (None, R.TERMINATING)
    assert (t["RouteEviction"].success, t["TerminatingRoute"].success) == (R.TERMINATING, R.TERMINATED)
    assert t["ServiceDiscoverySync"].success is None and t["ServiceDiscoverySync"].failure is None
    assert (t["ReconcileDeployment"].success, t["ReconcileDeployment"].failure) == (None, D.SCALING)
    assert (t["DestroyingDeployment"].success, t["DestroyingDeployment"].failure) == (
        D.DESTROYED,
        D.DESTROYED,
    )
    assert by_name["HealthCheckRoute"].target_statuses == {R.HEALTHY, R.UNHEALTHY, R.DEGRADED}
    assert by_name["RunningRoute"].target_statuses == {R.DEGRADED, R.HEALTHY, R.UNHEALTHY, R.FAILED_TO_START}
