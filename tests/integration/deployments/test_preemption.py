"""Replicas are sessions: preempted by the group's rules like any other, both backends.  A
deployment whose replica was preempted is not READY (and /serve answers 503) until a replacement,
queued at the deployment's priority, runs again; in suspend mode a replica is stopped and
replaced, never SUSPENDED."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.cluster import Cluster, poll
from tests.support.deployments import create, get, in_traffic, ready, replica_session


@pytest.mark.parametrize("mode", ["terminate", "suspend"])
def test_a_preempted_replica_is_replaced_at_the_deployments_priority(
    own_cluster: Callable[..., Cluster], mode: str
) -> None:
    c = own_cluster()
    c.start_agent("only", cpu=1)
    settings = ("grace_period=0", "min_runtime=0", f"preemption_mode={mode}")
    assert c.corral("rg", "set", "default", *settings).returncode == 0
    low = {**replica_session(cpu=1), "priority": 1}
    create(c.http, "low", 1, session=low)
    victim = in_traffic(ready(c.http, "low", 1))[0]["session_id"]
    urgent = c.submit(command=["sleep", "4"], priority=50, resources={"cpu": 1})

    def preempted() -> bool:
        d = get(c.http, "low")
        return d["status"] == "SCALING" and d["ready"] == 0

    poll(preempted, 30, "the deployment to lose its preempted replica")
    assert c.http.get("/serve/low/").status_code == 503
    ended = c.wait(victim, timeout=30)
    assert ended["status"] in ("ERROR", "TERMINATED") and ended["cause"] == "preempted", ended
    c.wait(urgent["id"], {"RUNNING", "TERMINATED"}, timeout=30)
    assert get(c.http, "low")["ready"] == 0  # the replacement waits behind the higher priority
    d = ready(c.http, "low", 1, timeout=60)
    assert in_traffic(d)[0]["session_id"] != victim
    assert c.session(urgent["id"])["status"] == "TERMINATED"  # it ran to its end first
