"""Changes without downtime, under a steady 50 requests a second through /serve, both backends:
a rolling update of 3 replicas to a new revision fails no request; a replica killed with SIGKILL
fails at most the requests open on it, leaves traffic and is replaced by a HEALTHY one."""

from __future__ import annotations

import os
import signal

from tests.support.cluster import Cluster, poll
from tests.support.deployments import create, get, in_traffic, ready, replica_session
from tests.support.load import Load


def test_a_rolling_update_fails_no_request(cluster: Cluster) -> None:
    create(cluster.http, "roll", 3, drain_timeout=10)
    before = {r["session_id"] for r in in_traffic(ready(cluster.http, "roll", 3))}
    with Load(cluster.url, cluster.key, "/serve/roll/hello") as load:
        poll(lambda: load.sent >= 25, 10, "the load to start")
        changed = cluster.http.patch(
            "/api/v1/deployments/roll", json={"session": replica_session({"V": "2"})}
        )
        assert changed.status_code == 200 and changed.json()["revision"] == 2
        d = ready(cluster.http, "roll", 3, timeout=90, revision=2)
        sent = load.sent
        poll(lambda: load.sent >= sent + 25, 10, "requests to the new revision")
    assert load.failures == [], load.failures[:5]
    assert load.sent > 100
    after = {r["session_id"] for r in in_traffic(d)}
    assert all(r["revision"] == 2 for r in in_traffic(d)) and not after & before
    assert cluster.http.delete("/api/v1/deployments/roll").status_code == 202


def test_a_killed_replica_fails_at_most_its_open_requests_and_is_replaced(cluster: Cluster) -> None:
    create(cluster.http, "kill9", 3)
    ready(cluster.http, "kill9", 3)
    victim, pid = cluster.http.get("/serve/kill9/pid").text.split()
    with Load(cluster.url, cluster.key, "/serve/kill9/hello") as load:
        poll(lambda: load.sent >= 25, 10, "the load to start")
        os.kill(int(pid), signal.SIGKILL)

        def left() -> bool:
            routes = {r["session_id"]: r for r in get(cluster.http, "kill9")["routes"]}
            return not routes[victim]["in_traffic"]

        poll(left, 1.0 + 0.5, "the killed replica's route to leave traffic (one health interval)")
        d = ready(cluster.http, "kill9", 3, timeout=60)
    # Connections refused are tried on another route: only a request the replica had read fails.
    assert len(load.failures) <= 1, load.failures
    assert victim not in {r["session_id"] for r in in_traffic(d)}
    assert cluster.http.delete("/api/v1/deployments/kill9").status_code == 202
