"""Replicas that fail, both backends: one that never listens ends FAILED_TO_START after its start
limit and is replaced with a growing delay (no hot loop); one whose agent stops reporting goes
DEGRADED (STALE) and leaves traffic."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from tests.support.cluster import Cluster, poll
from tests.support.deployments import create, get, history, in_traffic, ready


def test_a_replica_that_never_listens_fails_to_start_and_is_replaced_slower_each_time(
    cluster: Cluster,
) -> None:
    deaf = {"command": ["sleep", "600"], "resources": {"cpu": 0.25}}
    create(cluster.http, "deaf", 1, session=deaf, health={"interval": 0.5, "unhealthy_threshold": 2})
    poll(lambda: len(get(cluster.http, "deaf")["routes"]) >= 2, 30, "a first replacement")
    time.sleep(6)  # the backoff is what is measured here: 1 s, 2 s, 4 s after each failure
    d = get(cluster.http, "deaf")
    assert 2 <= len(d["routes"]) <= 4, [r["status"] for r in d["routes"]]  # not one a cycle
    assert d["status"] == "SCALING" and d["ready"] == 0 and "the last ones ended" in d["message"]
    failed = [h for h in history(cluster.http, "deaf") if h["to_status"] == "FAILED_TO_START"]
    assert failed and "no good health check within 1 s of the replica's start" in failed[0]["message"]
    assert "connection refused" in failed[0]["message"]
    assert cluster.http.delete("/api/v1/deployments/deaf").status_code == 202
    poll(lambda: get(cluster.http, "deaf")["status"] == "DESTROYED", 60, "deaf DESTROYED")


def test_a_silent_agent_makes_its_routes_stale(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster(env={"CORRAL_AGENT_LEASE": "20", "CORRAL_FENCE_TIMEOUT": "40"})
    c.start_agent("quiet", cpu=2)
    create(c.http, "stale", 1)
    route = in_traffic(ready(c.http, "stale", 1))[0]
    c.signal_agent("quiet", signal.SIGSTOP)
    try:

        def degraded() -> bool:
            r = next(x for x in get(c.http, "stale")["routes"] if x["id"] == route["id"])
            return r["status"] == "DEGRADED" and not r["in_traffic"]

        poll(degraded, 10, "the route to go DEGRADED (3 intervals without a report) and leave traffic")
        stale = [h for h in history(c.http, "stale") if h["result"] == "STALE"]
        assert stale and stale[0]["to_status"] == "DEGRADED" and "not reporting" in stale[0]["message"]
        assert c.http.get("/serve/stale/").status_code == 503
    finally:
        c.signal_agent("quiet", signal.SIGCONT)
    ready(c.http, "stale", 1)  # reports resume: HEALTHY and in traffic again


def test_a_revision_that_never_gets_healthy_stops_its_rollout_and_the_old_one_serves(
    cluster: Cluster,
) -> None:
    create(cluster.http, "stuck", 1, progress_deadline=3)
    old = in_traffic(ready(cluster.http, "stuck", 1))[0]
    deaf = {"command": ["sleep", "600"], "resources": {"cpu": 0.25}}
    assert cluster.http.patch("/api/v1/deployments/stuck", json={"session": deaf}).json()["revision"] == 2

    def stalled() -> dict | None:
        d = get(cluster.http, "stuck")
        return d if d["rollout"] == "stalled" else None

    d = poll(stalled, 30, "the rollout to stop at its progress deadline")
    assert "not healthy within 3 s" in d["message"] and "undo" in d["message"]
    assert [r["id"] for r in in_traffic(d)] == [old["id"]]  # the old revision goes on serving
    assert cluster.http.get("/serve/stuck/").status_code == 200
    events = cluster.http.get("/api/v1/events", params={"type": "deployment.rollout_stalled"}).json()
    assert any(e["entity_id"] == d["id"] for e in events)
    undone = cluster.http.post("/api/v1/deployments/stuck/rollout/undo").json()
    assert undone["revision"] == 3
    d = ready(cluster.http, "stuck", 1)
    assert [r["id"] for r in in_traffic(d)] == [old["id"]]  # same spec as the old route's: kept
    assert cluster.http.delete("/api/v1/deployments/stuck").status_code == 202
