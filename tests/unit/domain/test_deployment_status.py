"""Every (status, status) pair of deployments and routes is allowed or refused exactly as the
seed's tables (plus DESIGN §7's completions) list them."""

from __future__ import annotations

import itertools

import pytest

from corral.domain.deployment_status import (
    DEPLOYMENT_ROWS,
    ROUTE_ROWS,
    Outcome,
    OutcomeTransitions,
    deployment_move_allowed,
    deployment_sources,
    route_move_allowed,
    route_sources,
)
from corral.domain.deployment_status import DeploymentStatus as D
from corral.domain.deployment_status import RouteStatus as R

# Written out again from the tables, independently of the implementation.
EXPECTED_DEPLOYMENT = {
    (D.PENDING, D.SCALING),  # CheckPendingDeployment success
    (D.SCALING, D.READY),  # ScalingDeployment success
    (D.READY, D.SCALING),  # CheckReplicaDeployment success, ReconcileDeployment failure
    (D.DESTROYING, D.DESTROYED),  # DestroyingDeployment success and failure
    (D.PENDING, D.DESTROYING),  # deletion requests
    (D.SCALING, D.DESTROYING),
    (D.READY, D.DESTROYING),
}
EXPECTED_ROUTE = {
    (R.PROVISIONING, R.DEGRADED),  # ProvisioningRoute success
    (R.PROVISIONING, R.FAILED_TO_START),  # ProvisioningRoute failure
    (R.UNHEALTHY, R.HEALTHY),  # HealthCheckRoute success
    (R.DEGRADED, R.HEALTHY),
    (R.HEALTHY, R.UNHEALTHY),  # HealthCheckRoute failure
    (R.DEGRADED, R.UNHEALTHY),
    (R.HEALTHY, R.DEGRADED),  # HealthCheckRoute stale
    (R.UNHEALTHY, R.DEGRADED),
    (R.DEGRADED, R.TERMINATING),  # RunningRoute failure
    (R.HEALTHY, R.TERMINATING),
    (R.UNHEALTHY, R.TERMINATING),  # and RouteEviction success
    (R.FAILED_TO_START, R.TERMINATING),
    (R.PROVISIONING, R.TERMINATING),  # DrainRoute (scale-down of a replica not yet up)
    (R.TERMINATING, R.TERMINATED),  # TerminatingRoute success
}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(D, D)))
def test_deployment_pair(src: D, dst: D) -> None:
    assert deployment_move_allowed(src, dst) is ((src, dst) in EXPECTED_DEPLOYMENT)


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(R, R)))
def test_route_pair(src: R, dst: R) -> None:
    assert route_move_allowed(src, dst) is ((src, dst) in EXPECTED_ROUTE)


def test_sources_are_the_guards_of_each_target() -> None:
    assert route_sources(R.TERMINATING) == {
        R.PROVISIONING,
        R.DEGRADED,
        R.HEALTHY,
        R.UNHEALTHY,
        R.FAILED_TO_START,
    }
    assert route_sources(R.TERMINATED) == {R.TERMINATING}
    assert deployment_sources(D.DESTROYING) == {D.PENDING, D.SCALING, D.READY}
    assert deployment_sources(D.DESTROYED) == {D.DESTROYING}


def test_terminal_statuses_go_nowhere() -> None:
    assert not any(deployment_move_allowed(D.DESTROYED, d) for d in D)
    assert not any(route_move_allowed(R.TERMINATED, r) for r in R)


def test_every_row_names_a_handler_of_the_tables() -> None:
    handlers = {h for h, _, _ in DEPLOYMENT_ROWS}
    assert handlers == {
        "CheckPendingDeployment",
        "ScalingDeployment",
        "CheckReplicaDeployment",
        "ReconcileDeployment",
        "DestroyingDeployment",
        "ApplyDeletion",
    }
    assert {h for h, _, _ in ROUTE_ROWS} == {
        "ProvisioningRoute",
        "HealthCheckRoute",
        "RunningRoute",
        "RouteEviction",
        "TerminatingRoute",
        "DrainRoute",
    }


def test_outcome_transitions_pick_by_outcome() -> None:
    t = OutcomeTransitions(success=R.HEALTHY, failure=R.UNHEALTHY, stale=R.DEGRADED)
    assert [t.to(o) for o in Outcome] == [R.HEALTHY, R.UNHEALTHY, R.DEGRADED]
    assert OutcomeTransitions(failure=R.TERMINATING).to(Outcome.SUCCESS) is None
