"""Judging a route from its agent's health reports: pure, with the clock passed in.

The agent probes its replica and counts results in a row; the manager stores its last report
and judges here against the deployment's thresholds (DESIGN §7: the manager never probes)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from corral.domain.deployment_status import Outcome, RouteStatus
from corral.domain.deployments import HealthCheck

R = RouteStatus


@dataclass(frozen=True)
class Health:
    """A route's last health report."""

    ok_in_a_row: int = 0
    failed_in_a_row: int = 0
    reported_at: datetime | None = None
    """When the manager received it (its clock): what staleness is measured from."""
    detail: str = ""
    """The last probe's result: a status code, or why it failed ("connection refused")."""


def provisioning(
    health: Health, started_at: datetime | None, ended: bool, now: datetime, check: HealthCheck
) -> tuple[Outcome, str] | None:
    """ProvisioningRoute's outcome: SUCCESS at the first good probe; FAILURE once the replica's
    session has ended, or no probe succeeded within the start limit from its start; None while
    it may still come up (a replica still queued has no limit: it has not started)."""
    if ended:
        return Outcome.FAILURE, "the replica's session ended before it answered a health check"
    if health.ok_in_a_row > 0:
        return Outcome.SUCCESS, f"first good health check ({health.detail or 'ok'})"
    if started_at is not None and (now - started_at).total_seconds() > check.start_limit:
        seen = f"; last: {health.detail}" if health.detail else "; no probe result"
        limit = f"{check.start_limit:g} s"
        return Outcome.FAILURE, f"no good health check within {limit} of the replica's start{seen}"
    return None


def checked(
    status: RouteStatus, health: Health, now: datetime, check: HealthCheck
) -> tuple[Outcome, str] | None:
    """HealthCheckRoute's outcome for a HEALTHY, UNHEALTHY or DEGRADED route: STALE when its agent's
    last report is older than the stale limit, SUCCESS after `healthy_threshold` good probes in a
    row, FAILURE after `unhealthy_threshold` bad ones; None when nothing changes."""
    age = None if health.reported_at is None else (now - health.reported_at).total_seconds()
    if age is None or age > check.stale_after:
        if status is R.DEGRADED:
            return None
        return Outcome.STALE, f"no health report for {check.stale_after:g} s (its agent is not reporting)"
    if health.ok_in_a_row >= check.healthy_threshold and status is not R.HEALTHY:
        return Outcome.SUCCESS, f"{health.ok_in_a_row} good health checks in a row"
    if health.failed_in_a_row >= check.unhealthy_threshold and status is not R.UNHEALTHY:
        return Outcome.FAILURE, f"{health.failed_in_a_row} failed health checks in a row: {health.detail}"
    return None
