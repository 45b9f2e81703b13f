"""Who a kernel runs as, and what it may touch: an agent started as root (CI runs as root) never runs
a kernel as root unless told to; each kernel runs as its owner's mapped uid or the agent's default
account, owns its files, cannot read another user's, and stays under its cgroup limits."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.support.cluster import Cluster, poll
from tests.support.preload import euid_spy, euids
from tests.support.tenants import client, make_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="identity switching needs an agent started as root")


def corral_uid() -> int:
    """The default kernel account's uid; read in the test, since the session fixture `kernel_account`
    creates the account on a fresh machine (at collection time it may not exist yet)."""
    return pwd.getpwnam("corral").pw_uid


def test_a_root_agent_runs_kernels_as_its_unprivileged_account(cluster: Cluster) -> None:
    done = cluster.corral("run", "--", "sh", "-c", 'id -u; id -G; echo "$HOME"; touch "$HOME/x" && echo ok')
    assert done.returncode == 0, done.stderr
    uid, groups, home, ok = done.stdout.split("\n")[:4]
    assert int(uid) == corral_uid() != 0
    assert "0" not in groups.split(), "no supplementary group of root's"
    assert not home.startswith("/root") and ok == "ok"
    listed = cluster.corral("agent", "list")
    assert f"corral (uid {corral_uid()})" in listed.stdout, listed.stdout


@pytest.mark.parametrize("spawn", ["helper", "fallback"])
def test_a_kernel_starts_clean_inside_its_cgroup(cluster: Cluster, spawn: str) -> None:
    """In its own memory cgroup, every uid and gid its account's, no supplementary group, no signal
    ignored or blocked (it can always be stopped gracefully): through the compiled helper and through
    the Python fallback an agent uses without a C compiler."""
    group = "default"
    if spawn == "fallback":
        group = "fallback-" + uuid.uuid4().hex[:6]
        cluster.start_agent(group, cpu=1, resource_group=group, CORRAL_AGENT_SPAWN_HELPER="false")
    run = ("run", "--resource-group", group, "--", "cat", "/proc/self/status", "/proc/self/cgroup")
    done = cluster.corral(*run)
    assert done.returncode == 0, done.stderr
    status = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line and "\t" in line)
    uid, gid = corral_uid(), pwd.getpwnam("corral").pw_gid
    assert status["Uid"].split() == [str(uid)] * 4 and status["Gid"].split() == [str(gid)] * 4
    assert status["Groups"].strip() == ""
    # Standard signals 1-31 (glibc reserves 32 and 33 for itself and may leave them ignored).
    standard = (1 << 31) - 1  # bit n-1 is signal n
    assert (int(status["SigIgn"], 16) & standard, int(status["SigBlk"], 16) & standard) == (0, 0)
    lines = done.stdout.splitlines()
    # cgroup v1 names the memory hierarchy; on v2 the unified one ("0::") holds the memory controller.
    memory = [line for line in lines if ":memory:" in line] or [
        line for line in lines if line.startswith("0::")
    ]
    assert len(memory) == 1 and "/corral-" in memory[0], memory

    # Like a shell, 127 and the reason, whichever path started it.
    missing = cluster.submit(command=["/nonexistent/program"], resource_group=group)
    ended = cluster.wait(missing["id"])
    assert (ended["status"], ended["exit_code"]) == ("ERROR", 127), ended
    reason = cluster.output(missing["id"])
    assert "/nonexistent/program" in reason
    assert "corral: cannot execute" in reason, reason
    agents = [group] if spawn == "fallback" else ["agent-a", "agent-b"]
    logs = "".join((cluster.workdir / f"agent-{a}.log").read_text() for a in agents)
    assert ("through the Python fallback" in logs) == (spawn == "fallback"), "the path tested is named"

    # The kernel's environment applies only once it runs as its account: a preloaded library of its
    # own never runs as root on the way (it records each process's effective uid it is loaded into).
    if shutil.which("cc") is None:
        pytest.skip("building the preloaded library needs a C compiler")
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp).chmod(0o777)
        env = euid_spy(Path(tmp))
        ran = cluster.wait(cluster.submit(command=["true"], env=env, resource_group=group)["id"])
        assert ran["status"] == "TERMINATED", ran
        assert euids(env) == [str(uid)], "preloaded as root, or never"


def test_users_cannot_read_each_others_files(cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    keys, uids = {}, {"a": 20001, "b": 20002}
    for who in ("a", "b"):
        keys[who] = make_user(cluster, f"{who}-{tag}", [f"p{who}-{tag}"])
        mapped = cluster.corral_json("user", "update", f"{who}-{tag}", "--uid", str(uids[who]))
        assert mapped["run_as"] == {"uid": uids[who]}
    write = (
        'echo secret > "$CORRAL_CHECKPOINT_DIR/s"; echo secret > s; '
        'echo "$CORRAL_CHECKPOINT_DIR"; pwd; id -u; ls -ld . "$CORRAL_CHECKPOINT_DIR"'
    )
    with client(cluster, keys["a"]) as a:
        made = a.post("/api/v1/sessions", json={"command": ["sh", "-c", write], "project": f"pa-{tag}"})
        assert made.status_code == 201, made.text
    done = cluster.wait(made.json()["id"])
    assert done["status"] == "TERMINATED", done
    checkpoint, work, uid, *_ = cluster.output(done["id"]).split("\n")
    assert int(uid) == 20001
    for path in (f"{checkpoint}/s", f"{work}/s", checkpoint, work):
        assert os.stat(path).st_uid == 20001, path
    assert os.stat(checkpoint).st_mode & 0o077 == 0 and os.stat(work).st_mode & 0o077 == 0

    read = (
        f'id -u; cat "{checkpoint}/s" || echo denied; cat "{work}/s" || echo denied; '
        f'ls "{work}" || echo denied'
    )
    with client(cluster, keys["b"]) as b:
        made = b.post("/api/v1/sessions", json={"command": ["sh", "-c", read], "project": f"pb-{tag}"})
        assert made.status_code == 201, made.text
    done = cluster.wait(made.json()["id"])
    out = cluster.output(done["id"])
    assert out.split("\n")[:4] == ["20002", "denied", "denied", "denied"], out
    assert "secret" not in out
    assert "Permission denied" in out

    # The mapping can never be root, and can be cleared (back to the agent's default account).
    refused = cluster.http.patch(f"/api/v1/users/a-{tag}", json={"run_as": {"uid": 0}})
    assert refused.status_code == 422 and "run_as.uid" in refused.text
    assert cluster.corral_json("user", "update", f"a-{tag}", "--no-uid")["run_as"] is None


def test_limits_and_oom_detection_hold_for_an_unprivileged_kernel(cluster: Cluster) -> None:
    hog = "python3 -c 'x = bytearray(400 << 20); print(len(x))'"
    s = cluster.submit(command=["sh", "-c", hog], resources={"cpu": 1, "mem": "64M"})
    done = cluster.wait(s["id"])
    [k] = done["kernels"]
    assert (done["status"], done["cause"], k["oom_killed"]) == ("ERROR", "oom_killed", True), done
    assert k["detail"]["uid"] == corral_uid() and k["detail"]["memory_mode"] != "watchdog"


def test_a_kernel_cannot_have_its_agent_ship_a_file_it_may_not_read(cluster: Cluster) -> None:
    # It owns its directory, so it can replace its log file with a link to root's secrets.
    swap = "rm -f stdout.log; ln -s /etc/shadow stdout.log; echo gone >&2"
    s = cluster.submit(command=["sh", "-c", swap])
    done = cluster.wait(s["id"])
    assert done["status"] == "TERMINATED", done
    out = cluster.output(done["id"])
    assert "root:" not in out and "gone" in out


def test_root_kernels_need_the_flag_and_show_in_the_agent_list(cluster: Cluster) -> None:
    group = "root-" + uuid.uuid4().hex[:6]
    cluster.start_agent(group + "-agent", cpu=1, resource_group=group, CORRAL_AGENT_ALLOW_ROOT_KERNELS="1")
    listed = cluster.corral("agent", "list")
    row = next(line for line in listed.stdout.splitlines() if line.strip().startswith(group))
    assert "root (uid 0) (allow_root_kernels is set)" in row, listed.stdout
    s = cluster.submit(command=["id", "-u"], resource_group=group)
    cluster.wait(s["id"])
    assert cluster.output(s["id"]).strip() == "0"

    # Without an account to use, a root agent refuses to start, and says how to fix it.
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "corral",
            "agent",
            "--manager",
            cluster.url,
            "--id",
            "x-" + group,
            "--kernel-user",
            "no-such-account",
            "--work-dir",
            str(cluster.workdir / ("x-" + group)),
        ],
        env={**cluster.env, "CORRAL_AGENT_TOKEN": cluster.token},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert "'no-such-account' does not exist" in refused.stderr and "--allow-root-kernels" in refused.stderr
    assert "Traceback" not in refused.stderr
    poll(lambda: cluster.agent("x-" + group) is None, 5, "no such agent registered")
