"""Deployments end to end on both backends, with real replicas (HTTP servers) on real agents:
READY with HEALTHY routes, /serve in turn, scaling both ways, eviction of an unhealthy replica,
deletion, and the history of every handler outcome."""

from __future__ import annotations

from collections import Counter

import httpx

from tests.support.cluster import Cluster, poll
from tests.support.deployments import create, flags, get, history, in_traffic, ready, replica_session


def _served_by(c: Cluster, name: str, n: int) -> list[str]:
    """The session ids of the replicas that answered `n` requests through the proxy, in order."""
    out = []
    for _ in range(n):
        resp = c.http.get(f"/serve/{name}/hello")
        assert resp.status_code == 200, resp.text
        out.append(resp.text.split()[0])
    return out


def _delete(c: Cluster, name: str) -> None:
    assert c.http.delete(f"/api/v1/deployments/{name}").status_code == 202
    poll(lambda: get(c.http, name)["status"] == "DESTROYED", 60, f"{name} to be DESTROYED")


def test_replicas_serve_in_turn_and_scale_both_ways(cluster: Cluster) -> None:
    create(cluster.http, "web", 3)
    d = ready(cluster.http, "web", 3)
    sessions = {r["session_id"] for r in in_traffic(d)}
    assert all(r["address"] and r["health"] == "HTTP 200" for r in in_traffic(d))
    served = _served_by(cluster, "web", 6)
    assert set(served) == sessions and Counter(served) == Counter({s: 2 for s in sessions})
    assert served[:3] == served[3:]  # round-robin: the same order each turn
    big = bytes(range(256)) * (3 * 4096)  # 3 MiB: over the API's body limit, streamed both ways
    echoed = cluster.http.post("/serve/web/upload", content=big)
    assert echoed.status_code == 200 and echoed.content == big
    metrics = cluster.http.get("/metrics").text
    assert 'corral_serve_requests_total{code="200",deployment="web"} 7.0' in metrics
    assert 'corral_serve_request_seconds_count{deployment="web"} 7.0' in metrics
    assert 'corral_routes{deployment="web",status="HEALTHY"} 3.0' in metrics

    cluster.http.patch("/api/v1/deployments/web", json={"replicas": 1})
    d = ready(cluster.http, "web", 1)
    kept = {r["session_id"] for r in in_traffic(d)}
    assert kept < sessions
    drained = [h for h in history(cluster.http, "web") if h["handler"] == "DrainRoute"]
    assert len(drained) == 2 and all(h["to_status"] == "TERMINATING" for h in drained)
    assert set(_served_by(cluster, "web", 3)) == kept

    cluster.http.patch("/api/v1/deployments/web", json={"replicas": 4})
    d = ready(cluster.http, "web", 4)
    assert kept < {r["session_id"] for r in in_traffic(d)}  # three added, the one left kept
    _delete(cluster, "web")
    assert all(r["status"] == "TERMINATED" for r in get(cluster.http, "web")["routes"])
    for s in sessions:
        assert cluster.session(s)["status"] in ("TERMINATED", "CANCELLED")


def test_an_unhealthy_replica_leaves_traffic_is_evicted_and_replaced(cluster: Cluster) -> None:
    sick = flags(cluster)
    create(cluster.http, "flaky", 2, session=replica_session({"REPLICA_SICK": str(sick)}))
    d = ready(cluster.http, "flaky", 2)
    victim = in_traffic(d)[0]
    (sick / victim["session_id"]).touch()

    def gone() -> bool:
        routes = {r["id"]: r for r in get(cluster.http, "flaky")["routes"]}
        return routes[victim["id"]]["status"] in ("TERMINATING", "TERMINATED")

    poll(gone, 30, "the unhealthy route to be evicted")
    d = ready(cluster.http, "flaky", 2)
    assert victim["session_id"] not in {r["session_id"] for r in in_traffic(d)}
    mine = [h for h in history(cluster.http, "flaky") if h["route_id"] == victim["id"]]
    moves = [(h["handler"], h["result"], h["to_status"]) for h in mine if h["to_status"]]
    assert ("HealthCheckRoute", "FAILURE", "UNHEALTHY") in moves
    assert ("RouteEviction", "SUCCESS", "TERMINATING") in moves
    failed = next(h for h in mine if h["to_status"] == "UNHEALTHY")
    assert "HTTP 500" in failed["message"]
    _delete(cluster, "flaky")


def test_every_outcome_is_in_the_history_and_events(cluster: Cluster) -> None:
    create(cluster.http, "told", 1)
    d = ready(cluster.http, "told", 1)
    rows = history(cluster.http, "told")
    moved = [(h["handler"], h["from_status"], h["to_status"]) for h in rows if h["to_status"]]
    assert moved[0] == ("CheckPendingDeployment", "PENDING", "SCALING")
    assert ("ProvisioningRoute", "PROVISIONING", "DEGRADED") in moved
    assert ("HealthCheckRoute", "DEGRADED", "HEALTHY") in moved
    assert moved[-1] == ("ScalingDeployment", "SCALING", "READY")
    events = cluster.http.get("/api/v1/events", params={"limit": 1000}).json()
    kinds = Counter(e["type"] for e in events if e["entity_id"] in {d["id"], d["routes"][0]["id"]})
    assert kinds["deployment.created"] == 1 and kinds["route.created"] == 1
    assert kinds["deployment.status_changed"] == 2 and kinds["route.status_changed"] == 2
    assert kinds["route.traffic_changed"] == 1
    _delete(cluster, "told")


def test_no_route_in_traffic_is_a_503_with_retry_after(cluster: Cluster) -> None:
    create(cluster.http, "empty", 0)
    poll(lambda: get(cluster.http, "empty")["status"] == "READY", 30, "an empty deployment READY")
    resp = cluster.http.get("/serve/empty/")
    assert resp.status_code == 503 and resp.headers["retry-after"]
    assert resp.json()["error"]["details"]["field"] == "deployment"
    assert httpx.get(f"{cluster.url}/serve/empty/").status_code == 401  # no key, not public
    _delete(cluster, "empty")
