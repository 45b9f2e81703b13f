"""The fencing invariant: the manager declares an agent's kernels gone only after they are dead.

The test never takes the agent's word: it watches the kernel processes and their cgroup itself
(every 20 ms) and compares the moment the last one vanished with the manager's history row.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import psutil

from tests.support.cluster import Cluster, poll
from tests.support.proxy import Proxy

FENCE = {"CORRAL_AGENT_LEASE": "1.5", "CORRAL_FENCE_TIMEOUT": "3", "CORRAL_FENCE_MARGIN": "1"}
KERNEL = "setsid sh -c 'echo $$ > {g}; exec sleep 300' & echo $$ > {k}; sleep 300"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def cgroup_procs(pid: int) -> Path | None:
    """The kernel's memory cgroup, read from /proc (v1 or v2), if it has one."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") and "corral-" in path:
            return Path("/sys/fs/cgroup/memory" + path) / "cgroup.procs"
        if controllers == "" and "corral-" in path:
            return Path("/sys/fs/cgroup" + path) / "cgroup.procs"
    return None


class DeathWatch(threading.Thread):
    """Polls the processes and cgroup members every 20 ms; `died_at` is the wall time all were gone."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.procs = [p for p in (cgroup_procs(pid) for pid in pids) if p is not None]
        self.died_at: float | None = None
        self.start()

    def members(self) -> set[int]:
        found: set[int] = set()
        for path in self.procs:
            try:
                found |= {int(x) for x in path.read_text().split()}
            except (OSError, ValueError):
                continue
        return found

    def run(self) -> None:
        while True:
            if not any(alive(p) for p in self.pids) and not self.members():
                self.died_at = time.time()
                return
            time.sleep(0.02)


def start_kernel(c: Cluster, tmp_path: Path) -> tuple[str, list[int]]:
    k, g = tmp_path / "k.pid", tmp_path / "g.pid"
    s = c.submit(command=["sh", "-c", KERNEL.format(k=k, g=g)])
    c.wait(s["id"], {"RUNNING"})
    poll(lambda: all(p.exists() and p.read_text().strip() for p in (k, g)), 20, "the pid files")
    return s["id"], [int(k.read_text()), int(g.read_text())]


def declared_gone_at(c: Cluster, session_id: str) -> float:
    rows = [h for h in c.history(session_id) if h["handler"] == "KernelsDeclaredGone"]
    assert len(rows) == 1, c.history(session_id)
    return datetime.fromisoformat(rows[0]["created_at"]).timestamp()


def assert_fenced_in_order(c: Cluster, session_id: str, watch: DeathWatch, agent_id: str) -> None:
    final = c.wait(session_id, timeout=30)
    assert (final["status"], final["cause"]) == ("ERROR", "agent_transient")
    watch.join(timeout=10)
    assert watch.died_at is not None, "a kernel process outlived the fence"
    declared = declared_gone_at(c, session_id)
    assert watch.died_at < declared, f"declared gone {declared - watch.died_at:.3f}s before the last death"
    assert any(h["handler"] == "AgentLost" for h in c.history(session_id))
    agent = next(a for a in c.http.get("/api/v1/agents").json() if a["id"] == agent_id)
    assert not agent["used"], "allocations released"


def test_partition_kernels_die_before_the_manager_declares_them_gone(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    c = own_cluster(env=FENCE)
    proxy = Proxy(c.port)
    try:
        c.start_agent("far", manager_url=proxy.url)
        session_id, pids = start_kernel(c, tmp_path)
        watch = DeathWatch(pids)
        assert watch.procs or not Path("/sys/fs/cgroup/memory").is_dir()
        proxy.blackhole()
        assert_fenced_in_order(c, session_id, watch, "far")
        proxy.heal()
        poll(lambda: c.agent("far"), 30, "the agent to come back after the partition")
        after = c.wait(c.submit(command=["sh", "-c", "echo back"])["id"])
        assert after["result"] == "success"
    finally:
        proxy.close()


def test_stopped_agent_still_fences_before_the_manager_declares(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    c = own_cluster(env=FENCE)
    c.start_agent("frozen")
    session_id, pids = start_kernel(c, tmp_path)
    watch = DeathWatch(pids)
    c.signal_agent("frozen", signal.SIGSTOP)
    try:
        assert_fenced_in_order(c, session_id, watch, "frozen")
    finally:
        c.signal_agent("frozen", signal.SIGCONT)
    poll(lambda: c.agent("frozen"), 30, "the agent to register again once it runs")
