"""Judging routes from health reports: thresholds, staleness, the start limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from corral.domain.deployment_status import Outcome
from corral.domain.deployment_status import RouteStatus as R
from corral.domain.deployments import HealthCheck
from corral.domain.route_health import Health, checked, provisioning

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CHECK = HealthCheck(interval=10, healthy_threshold=2, unhealthy_threshold=3, initial_delay=5)


def fresh(ok: int = 0, failed: int = 0, age: float = 1.0) -> Health:
    return Health(ok, failed, NOW - timedelta(seconds=age), "200" if ok else "500")


def test_a_first_good_probe_ends_provisioning() -> None:
    got = provisioning(fresh(ok=1), NOW - timedelta(seconds=3), False, NOW, CHECK)
    assert got is not None and got[0] is Outcome.SUCCESS


def test_provisioning_fails_once_the_replica_ended_or_the_start_limit_passed() -> None:
    assert provisioning(Health(), None, True, NOW, CHECK)[0] is Outcome.FAILURE  # type: ignore[index]
    within = NOW - timedelta(seconds=CHECK.start_limit - 1)
    past = NOW - timedelta(seconds=CHECK.start_limit + 1)
    assert provisioning(fresh(failed=2), within, False, NOW, CHECK) is None
    got = provisioning(fresh(failed=4), past, False, NOW, CHECK)
    assert got is not None and got[0] is Outcome.FAILURE and "500" in got[1]


def test_a_queued_replica_has_no_start_limit() -> None:
    assert provisioning(Health(), None, False, NOW + timedelta(days=1), CHECK) is None


def test_thresholds_decide_healthy_and_unhealthy() -> None:
    assert checked(R.DEGRADED, fresh(ok=1), NOW, CHECK) is None
    assert checked(R.DEGRADED, fresh(ok=2), NOW, CHECK)[0] is Outcome.SUCCESS  # type: ignore[index]
    assert checked(R.HEALTHY, fresh(ok=9), NOW, CHECK) is None
    assert checked(R.HEALTHY, fresh(failed=2), NOW, CHECK) is None
    assert checked(R.HEALTHY, fresh(failed=3), NOW, CHECK)[0] is Outcome.FAILURE  # type: ignore[index]
    assert checked(R.UNHEALTHY, fresh(ok=2), NOW, CHECK)[0] is Outcome.SUCCESS  # type: ignore[index]


def test_a_report_older_than_three_intervals_is_stale() -> None:
    assert checked(R.HEALTHY, fresh(ok=5, age=29), NOW, CHECK) is None
    assert checked(R.HEALTHY, fresh(ok=5, age=31), NOW, CHECK)[0] is Outcome.STALE  # type: ignore[index]
    assert checked(R.DEGRADED, fresh(ok=5, age=31), NOW, CHECK) is None  # already DEGRADED


def test_defaults_follow_the_issue() -> None:
    h = HealthCheck()
    assert (h.path, h.interval, h.probe_timeout, h.healthy_threshold, h.unhealthy_threshold) == (
        "/health",
        10,
        5,
        1,
        3,
    )
    assert h.stale_after == 30 and HealthCheck(interval=2).probe_timeout == 2
