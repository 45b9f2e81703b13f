"""An agent whose cgroups disappear makes them again before a start; one that cannot is unschedulable,
with the reason, until it can (agent/health.py), and what it was ordered fails with the real cause."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corral.agent.cgroup import parent_name
from tests.support.cluster import CGROUP_ROOTS, Cluster, poll

CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
# Prints the kernel's memory cgroup (v1) and the limit set there.
SHOW_CGROUP = (
    'p=$(sed -n "s/^[0-9]*:memory://p" /proc/self/cgroup); echo "$p"; '
    'cat "/sys/fs/cgroup/memory$p/memory.limit_in_bytes"'
)


def parents(c: Cluster, agent_id: str) -> list[Path]:
    """The agent's parent cgroups (memory, cpu, cpuacct on cgroup v1), those there now."""
    name = parent_name(agent_id, c.workdir / agent_id)
    return [root / name for root in CGROUP_ROOTS if (root / name).is_dir()]


def remove_cgroups(dirs: list[Path], kernels_only: bool = False) -> None:
    """rmdir, as an operator (or a cleanup script) would: the kernels' emptied cgroups, then the parents."""
    for parent in dirs:
        for kept in [d for d in parent.iterdir() if d.is_dir()]:
            kept.rmdir()
        if not kernels_only:
            parent.rmdir()


def own_mount_namespace() -> None:
    """In the agent's child before exec: mounts of its own, so that its view of the cgroup
    hierarchies can be made read-only without touching the host's (or other tests' agents)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0 or libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "cannot make a private mount namespace")


def remount(pid: int, mounts: list[Path], how: str) -> None:
    """Remount these cgroup hierarchies read-only or writable in the namespace of process `pid` only."""
    for m in mounts:
        subprocess.run(
            ["nsenter", "--target", str(pid), "--mount", "mount", "-o", f"remount,bind,{how}", str(m)],
            check=True,
        )


def run(c: Cluster, command: str, **resources: Any) -> dict[str, Any]:
    s = c.wait(c.submit(command=["sh", "-c", command], resources={"cpu": 1, **resources})["id"])
    return dict(s)


def standing(c: Cluster, agent_id: str) -> tuple[bool | None, str | None]:
    info = (c.agent(agent_id) or {}).get("info", {})
    return info.get("schedulable"), info.get("unschedulable_reason")


def with_cgroup_v1(c: Cluster, agent_id: str) -> None:
    mode = (c.agent(agent_id) or {})["info"]["memory_mode"]
    if mode != "cgroup1":
        pytest.skip(f"these tests remove cgroup v1 directories; this agent uses {mode}")


def test_removed_cgroups_are_made_again_before_a_start(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster()
    c.start_agent("remade", cpu=1)
    with_cgroup_v1(c, "remade")
    assert run(c, "true")["result"] == "success"  # its emptied cgroup is kept for the next kernel
    mine = parents(c, "remade")
    assert len(mine) == 3 and all(any(p.iterdir()) for p in mine), mine

    # The kept cgroup alone removed, and no memory limit asked (its charge is not read): it was
    # handed out as it was, and the kernel failed 126 "cannot join cgroup".
    remove_cgroups(mine, kernels_only=True)
    assert run(c, "true")["result"] == "success"

    # Everything removed, parents too: they were not made again, and the kernel failed 127
    # "cannot start 'sh': FileNotFoundError", as if its command were missing.
    remove_cgroups(parents(c, "remade"))
    s = run(c, SHOW_CGROUP, mem="64M")
    assert s["result"] == "success", s
    cgroup, limit = c.output(s["id"]).split()
    name = parent_name("remade", c.workdir / "remade")
    assert cgroup.startswith(f"/{name}/") and int(limit) == 64 << 20, (cgroup, limit)
    assert len(parents(c, "remade")) == 3
    assert standing(c, "remade") == (True, None)


@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace of its own needs root")
def test_an_agent_that_cannot_make_its_cgroups_is_unschedulable_until_it_can(
    own_cluster: Callable[..., Cluster],
) -> None:
    # A lease long enough for the agent to be stopped a moment without being LOST.
    c = own_cluster(env={"CORRAL_AGENT_LEASE": "10", "CORRAL_FENCE_TIMEOUT": "20"})
    agent = c.start_agent("stuck", cpu=1, preexec_fn=own_mount_namespace)
    with_cgroup_v1(c, "stuck")
    assert run(c, "true")["result"] == "success"
    mine = parents(c, "stuck")
    mounts = [p.parent for p in mine]  # each v1 controller's hierarchy is a mount of its own
    assert standing(c, "stuck") == (True, None)

    # Placed on it before it can notice: its cgroups go, and its view of them turns read-only.
    c.signal_agent("stuck", signal.SIGSTOP)
    try:
        remount(agent.pid, mounts, "ro")
        remove_cgroups(mine)
        ordered = c.submit(command=["true"])
        poll(lambda: c.session(ordered["id"])["status"] != "PENDING", 10, "the session to be placed")
    finally:
        c.signal_agent("stuck", signal.SIGCONT)
    failed = c.wait(ordered["id"])
    [k] = failed["kernels"]
    assert (failed["status"], k["exit_code"]) == ("ERROR", 126), failed
    message = k["termination_message"] or ""
    assert message.startswith("corral: the kernel's cgroup cannot be made: the agent's cgroup"), message
    assert "cannot be made again: Read-only file system" in message and str(mine[0]) in message, message
    assert "FileNotFoundError" not in message

    # Unschedulable, with the reason, shown where placement reads it; its status stays ALIVE.
    _, reason = poll(
        lambda: (s := standing(c, "stuck"))[0] is False and s, 10, "the agent to say it is unschedulable"
    )
    assert "cannot be made again: Read-only file system" in reason, reason
    table = c.corral("agent", "list").stdout
    assert any(line.split()[0] == "stuck" and "no: " in line for line in table.splitlines()), table
    [listed] = [a for a in c.corral_json("agent", "list") if a["id"] == "stuck"]
    assert listed["status"] == "ALIVE"
    assert (listed["info"]["schedulable"], listed["info"]["unschedulable_reason"]) == (False, reason)
    waiting = c.submit(command=["sh", "-c", "echo ran"])
    poll(
        lambda: any("unschedulable: stuck" in h["message"] for h in c.history(waiting["id"])),
        10,
        "placement to skip the unschedulable agent",
    )
    assert c.session(waiting["id"])["status"] == "PENDING"

    # Writable again: the agent makes its cgroups and is schedulable again by itself.
    remount(agent.pid, mounts, "rw")
    poll(lambda: standing(c, "stuck") == (True, None), 10, "the agent to be schedulable again")
    assert len(parents(c, "stuck")) == len(mine)
    done = c.wait(waiting["id"])
    assert done["result"] == "success" and c.output(waiting["id"]) == "ran\n", done
