"""An emptied kernel cgroup is kept for the next kernel (agent/supervisor.py `_cgroup`): the kernel
that starts in it gets its own limits, is charged its own CPU time and blamed for its own OOM kills
only, never its predecessors'."""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.cluster import Cluster

# 300 MB held in memory by `tail`: killed under a 64M limit, fine without one.
HOG = "head -c 300000000 /dev/zero | tail -c 300000000 > /dev/null"
# 0.6 s of CPU whatever the machine's load (a second of wall time may get less on a busy machine).
BUSY = "python3 -c 'import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass'"


def kernel_of(c: Cluster, group: str, command: str, **resources: Any) -> dict[str, Any]:
    s = c.submit(command=["sh", "-c", command], resource_group=group, resources={"cpu": 1, **resources})
    [k] = c.wait(s["id"])["kernels"]
    return dict(k)


def test_a_kept_cgroup_holds_only_its_own_kernels_limits_and_counts(cluster: Cluster) -> None:
    group = "reuse-" + uuid.uuid4().hex[:6]
    cluster.start_agent(group + "-agent", cpu=1, resource_group=group)  # one kernel at a time

    capped = kernel_of(cluster, group, HOG, mem="64M")
    if capped["detail"]["memory_mode"] == "watchdog":
        # No cgroups here: nothing is kept (the watchdog's own OOM is test_retry's).
        assert "cgroup" not in capped["detail"]
        return
    assert (capped["status"], capped["oom_killed"]) == ("ERROR", True), capped

    # The same cgroup, its 64M limit lifted, its OOM kill not counted again.
    free = kernel_of(cluster, group, HOG)
    assert free["detail"]["cgroup"] == capped["detail"]["cgroup"], "the emptied cgroup was not kept"
    assert (free["status"], free["oom_killed"], free["exit_code"]) == ("TERMINATED", False, 0), free

    if capped["detail"]["cpu_mode"] != "none":
        # Its CPU time counts from its own start: 0.6 s of busy loop, then a second of sleep.
        busy = kernel_of(cluster, group, BUSY)
        idle = kernel_of(cluster, group, "sleep 1")
        assert idle["detail"]["cgroup"] == busy["detail"]["cgroup"] == capped["detail"]["cgroup"]
        assert busy["detail"]["cpu_seconds"] >= 0.5, busy["detail"]
        assert idle["detail"]["cpu_seconds"] < 0.3, idle["detail"]

    # And a limit asked for again is set again.
    again = kernel_of(cluster, group, HOG, mem="64M")
    assert again["detail"]["cgroup"] == capped["detail"]["cgroup"]
    assert (again["status"], again["oom_killed"]) == ("ERROR", True), again
