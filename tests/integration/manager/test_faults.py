"""Real faults: a killed agent, a killed manager, a stopped agent (SIGSTOP)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

from tests.support.cluster import Cluster, poll


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_agent_death_fails_the_session_after_fence_and_leaves_no_process(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    c = own_cluster()
    c.start_agent("victim")
    kpid, gpid = tmp_path / "kernel.pid", tmp_path / "grandchild.pid"
    script = f"setsid sh -c 'echo $$ > {gpid}; exec sleep 300' & echo $$ > {kpid}; sleep 300"
    s = c.submit(command=["sh", "-c", script])
    c.wait(s["id"], {"RUNNING"})
    poll(lambda: kpid.exists() and gpid.exists() and gpid.read_text().strip(), 20, "the pid files")
    kernel_pid, grandchild_pid = int(kpid.read_text()), int(gpid.read_text())
    assert not gone(kernel_pid) and not gone(grandchild_pid)

    c.agents["victim"].kill()
    killed_at = time.monotonic()
    final = c.wait(s["id"], timeout=30)
    assert (final["status"], final["cause"]) == ("ERROR", "agent_transient")
    assert time.monotonic() - killed_at >= 2  # not before the agent is even declared lost
    poll(lambda: gone(kernel_pid) and gone(grandchild_pid), 10, "the kernel and its setsid grandchild to die")
    assert c.corral("session", "info", s["id"]).returncode == 0


def test_manager_death_loses_nothing_and_runs_nothing_twice(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    c = own_cluster(env={"CORRAL_FENCE_TIMEOUT": "15", "CORRAL_AGENT_LEASE": "5"})
    c.start_agent("a1", cpu=2)
    c.start_agent("a2", cpu=2)
    runs = tmp_path / "runs.txt"
    script = f'echo "$CORRAL_SESSION_ID" >> {runs}; sleep 3; echo done'
    ids = [c.submit(command=["sh", "-c", script], name=f"m{i}")["id"] for i in range(6)]
    poll(lambda: sum(c.session(i)["status"] == "RUNNING" for i in ids) >= 2, 30, "two sessions running")

    c.kill_manager()
    time.sleep(1)  # the outage itself, not synchronisation: agents keep their kernels meanwhile
    c.start_manager()

    finals = [c.wait(i, timeout=60) for i in ids]
    assert [(f["status"], f["result"]) for f in finals] == [("TERMINATED", "success")] * 6
    started = runs.read_text().split()
    assert sorted(started) == sorted(ids), "each session ran exactly once"
    for i in ids:
        assert c.output(i) == "done\n"


def _results(c: Cluster, session_id: str, handler: str) -> list[str]:
    return [h["result"] for h in c.history(session_id) if h["handler"] == handler]


def test_stopped_agent_makes_prepare_expire_then_the_session_recovers(
    own_cluster: Callable[..., Cluster],
) -> None:
    # A long lease keeps the stopped agent ALIVE, so only the time in PREPARING can catch it.
    c = own_cluster(
        env={
            "CORRAL_AGENT_LEASE": "60",
            "CORRAL_FENCE_TIMEOUT": "120",
            "CORRAL_PREPARING_TIMEOUT": "1.5",
            "CORRAL_MAX_RESCHEDULES": "10",
        }
    )
    c.start_agent("sleepy")
    c.signal_agent("sleepy", signal.SIGSTOP)
    s = c.submit(command=["sh", "-c", "echo recovered"])
    poll(lambda: "EXPIRED" in _results(c, s["id"], "PrepareSessions"), 30, "an EXPIRED outcome")
    expired = next(h for h in c.history(s["id"]) if h["result"] == "EXPIRED")
    assert (expired["from_status"], expired["to_status"]) == ("PREPARING", "PENDING")
    assert "longer than" in expired["message"]
    c.signal_agent("sleepy", signal.SIGCONT)
    final = c.wait(s["id"], timeout=60)
    assert (final["status"], final["result"]) == ("TERMINATED", "success")


def test_lost_agent_makes_prepare_fail_retry_then_give_up(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster(
        env={
            "CORRAL_AGENT_LEASE": "1.5",
            "CORRAL_FENCE_TIMEOUT": "3",
            "CORRAL_PREPARING_TIMEOUT": "0",
            "CORRAL_MAX_TRIES": "3",
        }
    )
    c.start_agent("flaky")
    c.signal_agent("flaky", signal.SIGSTOP)
    # Placed at once, while its lease still runs.
    s = c.submit(command=["sh", "-c", "echo back"], retry_policy={"max_retries": 1, "retry_delay": 0})
    poll(lambda: "GIVE_UP" in _results(c, s["id"], "PrepareSessions"), 30, "a GIVE_UP outcome")
    results = _results(c, s["id"], "PrepareSessions")
    assert results.count("NEED_RETRY") == 2, results
    give_up = next(h for h in c.history(s["id"]) if h["result"] == "GIVE_UP")
    assert "not reachable" in give_up["message"] and "try 3" in give_up["message"]
    # Its order said "prepare and start": the silent agent may have started it before going quiet,
    # so it is stopped, never re-queued (no second copy, its capacity held) until the fence
    # declares it gone; then the retry policy takes over.
    assert (give_up["from_status"], give_up["to_status"]) == ("PREPARING", None)
    assert "already run" in give_up["message"]
    first = c.wait(s["id"], timeout=60)
    assert (first["status"], first["cause"]) == ("ERROR", "agent_transient"), first
    assert first["termination_reason"] == "scheduler_timeout"
    assert all(h["to_status"] != "PENDING" for h in c.history(s["id"]))
    c.signal_agent("flaky", signal.SIGCONT)
    child = poll(lambda: c.session(s["id"])["next_attempt_id"], 30, "the retry")
    final = c.wait(child, timeout=60)
    assert (final["status"], final["result"]) == ("TERMINATED", "success")


def test_agent_fences_itself_when_the_manager_stays_away(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    c = own_cluster()
    c.start_agent("alone")
    kpid = tmp_path / "kernel.pid"
    s = c.submit(command=["sh", "-c", f"echo $$ > {kpid}; echo before; sleep 300"])
    c.wait(s["id"], {"RUNNING"})
    poll(lambda: kpid.exists() and kpid.read_text().strip(), 20, "the kernel pid file")
    kernel_pid = int(kpid.read_text())
    poll(lambda: "before" in c.so_far(s["id"]), 20, "the first log line to reach the manager")
    c.kill_manager()
    # Past the fence timeout (4s here) with no manager, the agent kills its own kernels.
    poll(lambda: gone(kernel_pid), 20, "the agent to kill its kernel on its own")
    c.start_manager()
    final = c.wait(s["id"], timeout=30)
    assert (final["status"], final["cause"]) == ("ERROR", "agent_transient")
    assert "before" in c.output(s["id"])


def test_a_second_live_agent_with_the_same_id_is_refused(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster()
    c.start_agent("twin")
    first = c.agent("twin")
    assert first is not None
    original = c.agents["twin"]
    c.start_agent("twin", wait=False)  # the same id again, from another process
    c.agents["twin-original"] = original  # both are stopped when the cluster closes

    def refused() -> bool:
        return "in use by another live agent" in (c.workdir / "agent-twin.log").read_text()

    poll(refused, 20, "the second agent to be refused")
    # Nor can a registration that does not say which process it is take the id over.
    anonymous = {"agent_id": "twin", "hostname": "x", "address": "127.0.0.1", "capacity": {"cpu": 1}}
    taken = httpx.post(
        c.url + "/api/v1/agent/register", json=anonymous, headers={"Authorization": f"Bearer {c.token}"}
    )
    assert taken.status_code == 409, taken.text
    again = c.agent("twin")
    assert again is not None and again["epoch"] == first["epoch"], "the live agent was not fenced by its twin"
    s = c.submit(command=["sh", "-c", "echo still-works"])
    assert c.wait(s["id"])["result"] == "success"
