"""`corral up` as a service manager treats it: stop signals, restarts, key rotation, neighbours."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.cluster import poll
from tests.support.embedded import Up


@pytest.fixture
def ups(tmp_path: Path) -> Iterator[list[Up]]:
    made: list[Up] = []
    yield made
    for up in made:
        up.close()


def dead(pids: set[int]) -> bool:
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def running_kernel(up: Up, pid_file: Path) -> int:
    done = up.corral("run", "-d", "--", "sh", "-c", f"echo $$ > {pid_file}; exec sleep 600")
    assert done.returncode == 0, done.stderr
    poll(lambda: pid_file.exists() and pid_file.read_text().strip(), 30, "the kernel to start")
    return int(pid_file.read_text())


@pytest.mark.started_anyhow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_every_stop_signal_stops_everything_and_exits_0(ups: list[Up], tmp_path: Path, sig: int) -> None:
    up = Up(tmp_path / "home")
    ups.append(up)
    kernel = running_kernel(up, tmp_path / "k.pid")
    everything = up.tree() | {kernel}
    assert len(everything) >= 6  # up, 2 agents, 2 supervisors, the kernel
    assert up.stop(sig) == 0, up.log()[-2000:]
    poll(lambda: dead(everything), 10, "every process of the installation to be gone")


def test_two_installations_on_one_host_are_independent(ups: list[Up], tmp_path: Path) -> None:
    first, second = Up(tmp_path / "one"), Up(tmp_path / "two")
    ups += [first, second]
    kernel_one = running_kernel(first, tmp_path / "one.pid")
    kernel_two = running_kernel(second, tmp_path / "two.pid")
    assert first.stop() == 0
    poll(lambda: dead({kernel_one}), 10, "the first installation's kernel to be gone")
    assert psutil.pid_exists(kernel_two) and not dead({kernel_two}), "stopping one killed the other's kernel"
    done = second.corral("run", "--mem", "64M", "--", "sh", "-c", "echo still-here")
    assert (done.returncode, done.stdout) == (0, "still-here\n"), done.stderr
    sessions = json.loads(second.corral("session", "list", "-o", "json").stdout)
    assert sum(s["status"] == "RUNNING" for s in sessions) == 1


def test_restart_reuses_the_key_rotation_revokes_it_and_files_are_private(
    ups: list[Up], tmp_path: Path
) -> None:
    up = Up(tmp_path / "home")
    ups.append(up)
    first_key = up.key
    assert up.stop() == 0
    started = time.monotonic()
    up.start()  # at once: the stopped agents left, so their ids are free
    assert time.monotonic() - started < 30
    assert up.key == first_key
    assert up.stop() == 0
    up.start("--rotate-key")
    assert up.key != first_key
    old = httpx.get(up.url + "/api/v1/sessions", headers={"Authorization": f"Bearer {first_key}"})
    assert old.status_code == 401
    assert up.corral("session", "list").returncode == 0
    data = tmp_path / "home" / "data"
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    for path in (data / "corral.db", data / "agent_token", up.config):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_up_killed_hard_leaves_no_agent_behind(ups: list[Up], tmp_path: Path) -> None:
    up = Up(tmp_path / "home")
    ups.append(up)
    kernel = running_kernel(up, tmp_path / "k.pid")
    everything = up.tree() | {kernel}
    up.proc.kill()  # kill -9: no chance to stop anything itself
    up.proc.wait()
    poll(lambda: dead(everything), 20, "the agents and their kernels to follow corral up")
    up.start()  # and a restart is accepted at once, not refused as a twin
    assert up.alive_agents() == 2


def agent_pid(up: Up, agent_id: str) -> int:
    [me] = [a for a in up.get("/api/v1/agents") if a["id"] == agent_id]
    return int(me["info"]["pid"])


def test_a_killed_agent_is_logged_cleared_and_restarted(ups: list[Up], tmp_path: Path) -> None:
    """kill -9 of one local agent: `corral up` keeps serving, logs the death, kills what the dead
    agent left, and starts the same id again under a new epoch; the other agent is untouched."""
    up = Up(tmp_path / "home")
    ups.append(up)
    poll(lambda: "corral: ready at " in up.log(), 10, "the ready line, once the agents have registered")
    kernel = running_kernel(up, tmp_path / "k.pid")
    [s] = json.loads(up.corral("session", "list", "-o", "json").stdout)
    victim_id = s["kernels"][0]["agent"]
    other_id = next(a for a in ("local-1", "local-2") if a != victim_id)
    other_pid = agent_pid(up, other_id)
    epochs = {a["id"]: a["epoch"] for a in up.get("/api/v1/agents")}
    victim = psutil.Process(agent_pid(up, victim_id))
    left = {p.pid for p in victim.children(recursive=True)} | {kernel}
    victim.kill()

    def restarted() -> bool:
        again = {a["id"]: a for a in up.get("/api/v1/agents")}[victim_id]
        return again["status"] == "ALIVE" and again["epoch"] > epochs[victim_id]

    poll(restarted, 30, f"{victim_id} to come back under a new epoch")
    assert up.proc.poll() is None, up.log()[-2000:]
    assert dead(left), "the dead agent's supervisor or kernel outlived it"
    assert f"agent={victim_id}" in up.log() and "killed by SIGKILL" in up.log()
    assert agent_pid(up, other_id) == other_pid and up.alive_agents() == 2
    ended = poll(
        lambda: (x := up.get(f"/api/v1/sessions/{s['id']}"))["status"] in ("ERROR", "TERMINATED") and x,
        30,
        "the session to end",
    )
    assert ended["cause"] == "agent_transient"
    done = up.corral("run", "--", "sh", "-c", "echo after")
    assert (done.returncode, done.stdout) == (0, "after\n"), done.stderr


def test_what_a_killed_agent_left_is_killed_before_it_comes_back(ups: list[Up], tmp_path: Path) -> None:
    """The dead agent's supervisor is stopped (SIGSTOP), so it cannot kill its kernel on the agent's
    death: `corral up` kills both before the new incarnation registers and declares them gone."""
    up = Up(tmp_path / "home")
    ups.append(up)
    kernel = running_kernel(up, tmp_path / "k.pid")
    [s] = json.loads(up.corral("session", "list", "-o", "json").stdout)
    victim_id = s["kernels"][0]["agent"]
    epoch = {a["id"]: a["epoch"] for a in up.get("/api/v1/agents")}[victim_id]
    victim = psutil.Process(agent_pid(up, victim_id))
    [supervisor] = [p for p in victim.children() if "corral.agent.supervisor" in " ".join(p.cmdline())]
    supervisor.suspend()
    victim.kill()
    again = poll(
        lambda: (a := {x["id"]: x for x in up.get("/api/v1/agents")}[victim_id])["epoch"] > epoch and a,
        60,
        f"{victim_id} to register again",
    )
    assert again["status"] == "ALIVE"
    assert dead({supervisor.pid, kernel}), "the new incarnation registered beside the old one's kernel"
    assert "killing what a dead agent left" in up.log()


@pytest.mark.skipif(os.geteuid() != 0, reason="kernels change account only under a root agent")
def test_up_says_who_kernels_run_as_from_what_its_agents_enforce(ups: list[Up], tmp_path: Path) -> None:
    """Root kernels allowed from the environment: `corral up`'s banner, the agent list and the
    kernel itself agree (the banner said 'corral' while `id -u` printed 0)."""
    up = Up(tmp_path / "home", env={"CORRAL_AGENT_ALLOW_ROOT_KERNELS": "true"})
    ups.append(up)
    done = up.corral("run", "--", "id", "-u")
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr
    assert "kernels run as root (uid 0)" in up.log() and "'corral'" not in up.log()
    listed = up.corral("agent", "list", "-o", "json")
    assert {a["info"]["kernel_user"] for a in json.loads(listed.stdout)} == {
        "root (uid 0) (allow_root_kernels is set)"
    }
