"""CPU is enforced, not only counted: a kernel's cgroup quota is the cores it asked for, or the agent
says it cannot enforce it."""

from __future__ import annotations

import pytest

from tests.support.cluster import Cluster

BUSY = "import time\nend = time.monotonic() + 3\nwhile time.monotonic() < end:\n    pass"


def cores_used(c: Cluster, cpu: float) -> tuple[float | None, str]:
    """Average cores a 3 s busy loop used (from its cgroup's CPU usage), and the agent's cpu mode."""
    s = c.submit(command=["python3", "-c", BUSY], resources={"cpu": cpu})
    done = c.wait(s["id"])
    assert done["status"] == "TERMINATED", done
    [k] = done["kernels"]
    detail = k["detail"]
    if detail.get("cpu_seconds") is None:
        return None, detail["cpu_mode"]
    assert detail["wall_seconds"] >= 3
    return detail["cpu_seconds"] / detail["wall_seconds"], detail["cpu_mode"]


@pytest.mark.serial  # a CPU share: other tests' load would skew it
def test_a_half_core_kernel_uses_at_most_0_6_cores(cluster: Cluster) -> None:
    used, mode = cores_used(cluster, 0.5)
    agents = cluster.http.get("/api/v1/agents").json()
    if used is None:
        # Not enforced here: the agent must say so, in its info and in the kernel's detail.
        assert mode == "none" and all(a["info"]["cpu_mode"] == "none" for a in agents)
        return
    assert mode in ("cgroup1", "cgroup2") and all(a["info"]["cpu_mode"] == mode for a in agents)
    assert used <= 0.6, f"a --cpu 0.5 busy loop used {used:.2f} cores"
    # The same loop with a whole core is not held back (the measurement sees a busy loop as busy).
    whole, _ = cores_used(cluster, 1)
    assert whole is not None and whole >= 0.8, whole
