"""What an agent cannot run fails that kernel alone; a dead supervisor is replaced; nothing hangs."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from corral.agent.cgroup import parent_name
from tests.support.cluster import CGROUP_ROOTS, Cluster, poll


def kernel_cgroup_dirs(c: Cluster, agent_id: str) -> list[Path]:
    """The kernel cgroups under the agent's parent cgroups (none without cgroups)."""
    parents = [root / parent_name(agent_id, c.workdir / agent_id) for root in CGROUP_ROOTS]
    return [d for p in parents if p.is_dir() for d in p.iterdir() if d.is_dir()]


def supervisor_of(c: Cluster, agent_id: str) -> psutil.Process:
    agent = psutil.Process(c.agents[agent_id].pid)
    found = [p for p in agent.children() if "corral.agent.supervisor" in " ".join(p.cmdline())]
    assert len(found) == 1, found
    return found[0]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize(
    ("command", "code"),
    [(["/nonexistent/program"], 127), (["/etc/passwd"], 126)],
    ids=["missing", "not-exec"],
)
def test_an_unstartable_command_ends_like_in_a_shell(cluster: Cluster, command: list[str], code: int) -> None:
    s = cluster.wait(cluster.submit(command=command)["id"])
    assert (s["status"], s["cause"], s["exit_code"]) == ("ERROR", "kernel_nonzero_exit", code)
    assert s["kernels"][0]["termination_message"], "the reason is shown"
    after = cluster.wait(cluster.submit(command=["sh", "-c", "echo next"])["id"])
    assert after["result"] == "success"


HOSTILE = {
    # Its termination log is a FIFO: a plain open would block the agent for good.
    "fifo": 'rm -f "$CORRAL_TERMINATION_LOG"; mkfifo "$CORRAL_TERMINATION_LOG"; exit 1',
    # Its error record is nested past Python's recursion limit.
    "deep": "python3 -c \"import os; open(os.environ['CORRAL_ERROR_FILE'], 'w').write('[' * 10**5)\"; exit 2",
    # Its error record is a link to an endless device.
    "endless": 'ln -sf /dev/zero "$CORRAL_ERROR_FILE"; exit 3',
}


def test_files_a_kernel_controls_never_wedge_its_agent(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster()
    c.start_agent("only")
    for what, script in HOSTILE.items():
        s = c.wait(c.submit(command=["sh", "-c", script])["id"], timeout=30)
        assert (s["status"], s["cause"]) == ("ERROR", "kernel_nonzero_exit"), what
        after = c.wait(c.submit(command=["sh", "-c", "echo next"])["id"], timeout=30)
        assert after["result"] == "success", f"the agent stopped serving after {what}"


class SupervisorPipe:
    """A supervisor of our own, in watchdog mode (no cgroup), driven through its pipes like an agent."""

    def __init__(self, tmp_path: Path, spawn: str = "helper") -> None:
        env = {**os.environ, "CORRAL_SPAWN_HELPER": "off" if spawn == "fallback" else "on"}
        self.tmp_path = tmp_path
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "corral.agent.supervisor", "watchdog", ""],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.log = ""
        """Its stderr, once closed (it names the way it starts kernels when that is the fallback)."""

    def send(self, line: str) -> None:
        self.stdin.write(line + "\n")
        self.stdin.flush()

    def start(self, key: str, argv: list[str], events: int = 1, **extra: Any) -> list[dict[str, Any]]:
        """Starts `argv` (a PATH-only environment unless `env` is given) and reads `events` events."""
        files = {name: str(self.tmp_path / f"{key}.{name}") for name in ("stdout", "stderr")}
        cmd = {"op": "start", "key": key, "command": argv, "env": {"PATH": "/usr/bin:/bin"}}
        self.send(json.dumps({**cmd, "cwd": str(self.tmp_path), **files, **extra}))
        return [dict(json.loads(self.stdout.readline())) for _ in range(events)]

    def close(self) -> int:
        """End of file: the supervisor kills what runs and exits; its exit code."""
        self.stdin.close()
        code = self.proc.wait(timeout=10)
        self.stdout.close()
        assert self.proc.stderr is not None
        self.log = self.proc.stderr.read()
        self.proc.stderr.close()
        return code


def test_the_supervisor_survives_a_command_it_cannot_spawn(tmp_path: Path) -> None:
    sup = SupervisorPipe(tmp_path)
    [bad] = sup.start("bad.0", ["/bin/true"], env={"A=B": "x"})
    assert (bad["ev"], bad["exit_code"]) == ("exited", 127) and bad["start_error"]
    sup.send("not json")
    assert json.loads(sup.stdout.readline())["ev"] == "error"
    [good] = sup.start("good.0", ["/bin/true"])
    assert good["ev"] == "started" and sup.proc.poll() is None
    assert sup.close() == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a kernel's account needs root")
@pytest.mark.parametrize("spawn", ["helper", "fallback"])
def test_a_kernel_that_changes_account_and_cannot_start_ends_like_in_a_shell(
    tmp_path: Path, spawn: str
) -> None:
    """Through the compiled helper or its Python fallback: a missing program ends it 127 and one that
    is not executable 126, each with the reason in its stderr, and the supervisor goes on; the next one
    runs as the account, with its group and no other."""
    account = pwd.getpwnam("nobody")
    tmp_path.chmod(0o777)
    sup = SupervisorPipe(tmp_path, spawn)
    user = {"user": {"uid": account.pw_uid, "gid": account.pw_gid}}
    for key, argv, code in [("missing.0", ["/nonexistent/program"], 127), ("noexec.0", ["/etc/passwd"], 126)]:
        started, ended = sup.start(key, argv, events=2, **user)
        assert (started["ev"], ended["ev"], ended["exit_code"]) == ("started", "exited", code), ended
        assert argv[0] in (tmp_path / f"{key}.stderr").read_text()
    started, ended = sup.start("id.0", ["sh", "-c", "id -u; id -G"], events=2, **user)
    assert (started["ev"], ended["ev"], ended["exit_code"]) == ("started", "exited", 0)
    uid, groups = (tmp_path / "id.0.stdout").read_text().split()
    assert (uid, groups) == (str(account.pw_uid), str(account.pw_gid))
    assert sup.close() == 0
    assert ("Python fallback" in sup.log) == (spawn == "fallback"), "the path tested is the one named"


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a kernel's account needs root")
def test_log_files_replaced_by_a_link_or_a_fifo_fail_that_start_alone(tmp_path: Path) -> None:
    """The account owns its kernel's directory, so it can put a link (to a file only root may write)
    or a FIFO (which would block an open) where the supervisor, as root, opens the kernel's logs."""
    account = pwd.getpwnam("nobody")
    user = {"user": {"uid": account.pw_uid, "gid": account.pw_gid}}
    secret = tmp_path / "root-only"
    secret.write_text("root's\n")
    secret.chmod(0o600)
    tmp_path.chmod(0o777)
    sup = SupervisorPipe(tmp_path)
    for stream in ("stdout", "stderr"):
        (tmp_path / f"link.0.{stream}").symlink_to(secret)
        os.mkfifo(tmp_path / f"fifo.0.{stream}")
    for key in ("link.0", "fifo.0"):
        [ended] = sup.start(key, ["sh", "-c", "echo written"], **user)
        assert (ended["ev"], ended["exit_code"]) == ("exited", 126) and ended["start_error"], ended
    assert secret.read_text() == "root's\n"
    started, ended = sup.start("after.0", ["true"], events=2, **user)
    assert (started["ev"], ended["ev"], ended["exit_code"]) == ("started", "exited", 0)
    assert sup.close() == 0


@pytest.mark.serial  # a time bound: other tests' load would skew it
def test_a_killed_supervisor_ends_its_kernels_and_is_replaced(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    c = own_cluster(env={"CORRAL_AGENT_LEASE": "5", "CORRAL_FENCE_TIMEOUT": "10"})
    c.start_agent("solo", cpu=3)
    # Kernels before them: the sleepers start in cgroups the supervisor kept, named after these.
    for s in [c.submit(command=["true"]) for _ in range(3)]:
        assert c.wait(s["id"])["result"] == "success"
    pids = [tmp_path / f"k{i}.pid" for i in range(3)]
    ids = [c.submit(command=["sh", "-c", f"echo $$ > {p}; exec sleep 300"])["id"] for p in pids]
    for i in ids:
        c.wait(i, {"RUNNING"})
    poll(lambda: all(p.exists() and p.read_text().strip() for p in pids), 20, "the kernels' pid files")
    kernels = [int(p.read_text()) for p in pids]
    old = supervisor_of(c, "solo")
    old.kill()
    killed = time.monotonic()
    finals = [c.wait(i, timeout=10) for i in ids]
    assert time.monotonic() - killed < 5, "not within a lease (5 s here)"
    assert {(f["status"], f["cause"]) for f in finals} == {("ERROR", "agent_transient")}
    assert all(gone(k) for k in kernels)
    # Every kernel cgroup was the dead supervisor's, kept ones too: none is left behind.
    assert not kernel_cgroup_dirs(c, "solo")
    assert supervisor_of(c, "solo").pid != old.pid
    after = c.wait(c.submit(command=["sh", "-c", "echo next"])["id"])
    assert after["result"] == "success"
    assert c.agents["solo"].poll() is None, "the agent itself was not restarted"


def test_creating_is_bounded(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster(
        env={"CORRAL_CREATING_TIMEOUT": "1.5", "CORRAL_AGENT_LEASE": "60", "CORRAL_FENCE_TIMEOUT": "120"}
    )
    c.start_agent("slow")
    sup = supervisor_of(c, "slow")
    sup.suspend()  # the start order is handed over, but nothing confirms the kernel started
    try:
        s = c.submit(command=["sh", "-c", "sleep 300"])
        poll(
            lambda: any(
                h["result"] == "EXPIRED" and h["to_status"] == "TERMINATING" for h in c.history(s["id"])
            ),
            30,
            "CREATING to expire",
        )
        expired = next(h for h in c.history(s["id"]) if h["result"] == "EXPIRED")
        assert (expired["handler"], expired["from_status"]) == ("ExpireCreating", "CREATING")
    finally:
        sup.resume()
    final = c.wait(s["id"], timeout=30)
    assert (final["status"], final["cause"]) == ("ERROR", "scheduler_timeout")


def test_terminating_is_bounded_by_a_forced_kill(own_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    c = own_cluster(env={"CORRAL_TERMINATING_TIMEOUT": "1.5"})
    c.start_agent("patient", CORRAL_AGENT_GRACE="600")  # SIGTERM would wait ten minutes for SIGKILL
    pid_file = tmp_path / "k.pid"
    s = c.submit(command=["sh", "-c", f"trap '' TERM; echo $$ > {pid_file}; while true; do sleep 0.1; done"])
    c.wait(s["id"], {"RUNNING"})
    poll(lambda: pid_file.exists() and pid_file.read_text().strip(), 20, "the kernel's pid file")
    assert c.http.post(f"/api/v1/sessions/{s['id']}/cancel").status_code == 202
    final = c.wait(s["id"], timeout=20)
    assert (final["status"], final["cause"]) == ("TERMINATED", "user_cancelled")
    assert gone(int(pid_file.read_text()))
    assert any("SIGKILL" in h["message"] for h in c.history(s["id"]) if h["handler"] == "TerminateSessions")
    agent = c.agent("patient")
    assert agent is not None and not agent["used"], "capacity released"


def test_a_stuck_supervisor_escalates_to_a_fence_and_is_replaced(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    # The supervisor is frozen: neither the kill nor the SIGKILL order is carried out.  TERMINATING
    # then fences the agent; the agent takes the supervisor down, kills the kernel itself through its
    # cgroup (or process group), and only then registers again.
    c = own_cluster(env={"CORRAL_TERMINATING_TIMEOUT": "1"})
    c.start_agent("stuck")
    pid_file = tmp_path / "k.pid"
    s = c.submit(command=["sh", "-c", f"echo $$ > {pid_file}; exec sleep 300"])
    c.wait(s["id"], {"RUNNING"})
    poll(lambda: pid_file.exists() and pid_file.read_text().strip(), 20, "the kernel's pid file")
    kernel = int(pid_file.read_text())
    frozen = supervisor_of(c, "stuck")
    frozen.suspend()
    assert c.http.post(f"/api/v1/sessions/{s['id']}/cancel").status_code == 202
    final = c.wait(s["id"], timeout=60)
    assert (final["status"], final["cause"]) in {
        ("TERMINATED", "user_cancelled"),
        ("ERROR", "agent_transient"),
    }
    assert gone(kernel)
    messages = " | ".join(h["message"] for h in c.history(s["id"]) if h["handler"] == "TerminateSessions")
    assert "SIGKILL" in messages and "fenced" in messages, messages
    poll(lambda: c.agent("stuck"), 30, "the agent to register again")
    assert not psutil.pid_exists(frozen.pid) or frozen.status() == psutil.STATUS_ZOMBIE
    after = c.wait(c.submit(command=["sh", "-c", "echo next"])["id"], timeout=30)
    assert after["result"] == "success"


@pytest.mark.started_anyhow
def test_a_kernel_starts_with_default_signals(cluster: Cluster, tmp_path: Path) -> None:
    """The supervisor ignores SIGTERM/SIGINT (and Python ignores SIGPIPE): a kernel must not inherit
    that, or a cancel could never be graceful and `yes | head` would complain of a broken pipe."""
    mark = tmp_path / "cleaned"
    trap = f"trap 'echo cleaned > {mark}; exit 0' TERM; yes | head -1; while :; do sleep 0.1; done"
    s = cluster.submit(command=["sh", "-c", trap])
    cluster.wait(s["id"], {"RUNNING"})
    poll(lambda: "y" in cluster.so_far(s["id"]), 20, "the kernel's first output")
    assert cluster.http.post(f"/api/v1/sessions/{s['id']}/cancel").status_code == 202
    done = cluster.wait(s["id"])
    assert mark.read_text() == "cleaned\n"  # it got SIGTERM and cleaned up within its grace
    assert done["kernels"][0]["signal"] is None
    assert "Broken pipe" not in cluster.output(s["id"])


def _as_a_background_job_under_nohup() -> None:
    """What an agent started by `cmd &` from a script, then under nohup, inherits."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2, signal.SIGALRM})


GLIBC_RESERVED = (1 << 31) | (1 << 32)
"""Signals 32 and 33: glibc's own, which its posix_spawn sets ignored and no program may use."""


@pytest.mark.started_anyhow
def test_a_kernel_starts_with_default_signals_whatever_its_agent_inherited(
    own_cluster: Callable[..., Cluster],
) -> None:
    c = own_cluster()
    c.start_agent("ignoring", preexec_fn=_as_a_background_job_under_nohup)
    s = c.submit(command=["grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status"])
    assert c.wait(s["id"])["status"] == "TERMINATED"
    masks = dict(line.split(":\t") for line in c.output(s["id"]).splitlines())
    assert int(masks["SigIgn"], 16) & ~GLIBC_RESERVED == 0, masks
    assert int(masks["SigBlk"], 16) == 0, masks


def test_a_failure_without_a_record_says_why_in_its_own_words(cluster: Cluster) -> None:
    s = cluster.submit(
        command=["sh", "-c", "echo working; echo 'disk quota exceeded on /scratch' >&2; exit 3"]
    )
    done = cluster.wait(s["id"])
    assert done["root_cause"]["message"] == "exited with code 3: disk quota exceeded on /scratch", done
    # A termination log comes first (DESIGN 4).
    said = 'echo "checkpoint is corrupt" > "$CORRAL_TERMINATION_LOG"; echo noise >&2; exit 4'
    done = cluster.wait(cluster.submit(command=["sh", "-c", said])["id"])
    assert done["root_cause"]["message"] == "exited with code 4: checkpoint is corrupt", done
    shown = cluster.corral("session", "info", done["id"])
    assert "exited with code 4: checkpoint is corrupt" in shown.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="kernels run as another account only under a root agent")
def test_a_command_the_kernels_account_cannot_reach_is_named_with_the_account(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A virtualenv in root's home: the kernel (account corral) cannot execute its python."""
    private = tmp_path / "roots-home"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    python = private / "venv-python"
    python.write_text("#!/bin/sh\necho never\n")
    python.chmod(0o755)
    done = cluster.wait(cluster.submit(command=[str(python)])["id"])
    assert (done["exit_code"], done["cause"]) == (126, "kernel_nonzero_exit"), done
    account = f"corral (uid {pwd.getpwnam('corral').pw_uid})"
    assert done["root_cause"]["message"] == (
        f"exited with code 126: cannot execute {python} as {account}: permission denied"
    ), done["root_cause"]
