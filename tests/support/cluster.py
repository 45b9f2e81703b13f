"""A real Corral for tests: a manager process and agent processes, driven over HTTP and the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

from corral.agent.cgroup import V1_ACCT, V1_CPU, V1_ROOT, V2_ROOT, parent_name
from tests.support.postgres import free_port

CGROUP_ROOTS = [V1_ROOT, V1_CPU, V1_ACCT, V2_ROOT]
"""Where agents make their parent cgroups: v1's memory, cpu and cpuacct trees, or v2's root."""

TERMINAL = {"TERMINATED", "CANCELLED", "ERROR"}

FAST_LIVENESS = {
    "CORRAL_AGENT_LEASE": "2",
    "CORRAL_FENCE_TIMEOUT": "4",
    "CORRAL_LOOP_INTERVAL": "0.2",
    "CORRAL_LONG_POLL": "1",
}


def scratch(path: Path) -> Path:
    """A directory kernels of any account may write to (they run as an unprivileged account)."""
    path.mkdir()
    path.chmod(0o1777)
    return path


def poll(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Call `check` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def healthy(url: str) -> bool:
    """The manager at `url` answers /healthz."""
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


class PortTaken(Exception):
    """Another process bound the port picked for this cluster's manager."""


class Cluster:
    def __init__(self, database_url: str, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.database_url = database_url
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o711)  # its agents' kernels run as another account and must pass through
        self.checkpoints = self.workdir / "checkpoints"
        self.checkpoints.mkdir(exist_ok=True)
        self.checkpoints.chmod(0o711)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = "crl_test_admin_" + os.urandom(8).hex()
        self.token = "agent-token-" + os.urandom(8).hex()
        self.env = {**os.environ, **FAST_LIVENESS, **(env or {})}
        self.manager: subprocess.Popen[bytes] | None = None
        self.started = False
        """The manager has answered once (agents may know its URL: a restart keeps the port)."""
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=30
        )

    # --- processes -------------------------------------------------------------------------
    def start_manager(self) -> None:
        for attempt in range(3):
            try:
                self._start_manager()
                return
            except PortTaken:
                # Another test's manager took our port between its pick and our bind: a first start
                # moves to another (agents started later use the new URL); a restart cannot.
                self.kill_manager()
                if self.started or attempt == 2:
                    raise
                self.port = free_port()
                self.url = f"http://127.0.0.1:{self.port}"
                self.http.base_url = httpx.URL(self.url)

    def _start_manager(self) -> None:
        env = {
            **self.env,
            "CORRAL_DATABASE_URL": self.database_url,
            "CORRAL_AGENT_TOKEN": self.token,
            "CORRAL_BOOTSTRAP_ADMIN_KEY": self.key,
            "CORRAL_PORT": str(self.port),
            # Storage every agent reaches, as on a real cluster: one checkpoint dir per retry chain.
            "CORRAL_CHECKPOINT_ROOT": str(self.checkpoints),
        }
        with open(self.workdir / "manager.log", "ab") as log:  # the child keeps its own descriptor
            since = log.tell()
            self.manager = subprocess.Popen(
                [sys.executable, "-m", "corral", "manager"], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        poll(lambda: self._answering(since), 30, "the manager to answer /healthz")
        self.started = True

    def _answering(self, since: int) -> bool:
        """Our manager answers: it listens on our port and /healthz answers there.  A free port is
        free only when picked: another test's manager may bind it first (ours then exits saying so,
        and until it does, the other answers in its place).  `since`: where this start's log begins."""
        assert self.manager is not None
        if self.manager.poll() is not None:
            with open(self.workdir / "manager.log", "rb") as f:
                f.seek(since)
                log = f.read().decode(errors="replace")
            if "address already in use" in log.lower():
                raise PortTaken(self.port)
            raise AssertionError(
                f"the manager exited ({self.manager.returncode}) before answering:\n{log[-2000:]}"
            )
        return self._listening() and healthy(self.url)

    def _listening(self) -> bool:
        assert self.manager is not None
        try:
            sockets = psutil.Process(self.manager.pid).net_connections("tcp")
        except psutil.NoSuchProcess:
            return False
        return any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port for c in sockets)

    def kill_manager(self) -> None:
        assert self.manager is not None
        self.manager.kill()
        self.manager.wait()

    def start_agent(
        self,
        agent_id: str,
        cpu: float = 2,
        mem: str = "4G",
        resource_group: str = "default",
        wait: bool = True,
        manager_url: str | None = None,
        preexec_fn: Callable[[], object] | None = None,
        **extra: str,
    ) -> subprocess.Popen[bytes]:
        env = {**self.env, "CORRAL_AGENT_TOKEN": self.token, **extra}
        with open(self.workdir / f"agent-{agent_id}.log", "ab") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "corral",
                    "agent",
                    "--manager",
                    manager_url or self.url,
                    "--id",
                    agent_id,
                    "--cpu",
                    str(cpu),
                    "--mem",
                    mem,
                    "--resource-group",
                    resource_group,
                    "--work-dir",
                    str(self.workdir / agent_id),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=preexec_fn,
            )
        self.agents[agent_id] = proc
        if wait:
            poll(lambda: self.agent(agent_id, epoch_above=0), 30, f"agent {agent_id} to register")
        return proc

    def agent(self, agent_id: str, epoch_above: int = -1) -> dict[str, Any] | None:
        for a in self.http.get("/api/v1/agents").json():
            if a["id"] == agent_id and a["status"] == "ALIVE" and a["epoch"] > epoch_above:
                return dict(a)
        return None

    def signal_agent(self, agent_id: str, sig: int) -> None:
        self.agents[agent_id].send_signal(sig)

    def close(self) -> None:
        for proc in [*self.agents.values(), self.manager]:
            if proc is not None and proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGCONT)
                except ProcessLookupError:
                    pass
                proc.terminate()
        for proc in [*self.agents.values(), self.manager]:
            if proc is not None:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    # Said, so that a slow stop shows in the run's output; then reaped (an unreaped
                    # child fails whichever test runs when it is collected).
                    what = list(proc.args)[3:5] if isinstance(proc.args, list) else proc.args
                    print(f"cluster: {what!r} ignored SIGTERM for 10 s", file=sys.stderr)
                    proc.kill()
                    proc.wait(timeout=10)
        self._release_cgroups()
        self.http.close()

    def _release_cgroups(self) -> None:
        """An agent killed by a test (SIGKILL) leaves its parent cgroups; in production its restart
        on the same work dir takes them back, here the work dir is the test's own: removed now (a
        day of runs had left 59 behind).  A busy one (a kernel still in it) stays, and shows."""
        for agent_id in self.agents:
            name = parent_name(agent_id, self.workdir / agent_id)
            for root in CGROUP_ROOTS:
                with contextlib.suppress(OSError):
                    (root / name).rmdir()

    # --- API and CLI -----------------------------------------------------------------------
    def submit(self, **body: Any) -> dict[str, Any]:
        resp = self.http.post("/api/v1/sessions", json=body)
        assert resp.status_code == 201, resp.text
        return dict(resp.json())

    def session(self, session_id: str) -> dict[str, Any]:
        return dict(self.http.get(f"/api/v1/sessions/{session_id}").json())

    def history(self, session_id: str) -> list[dict[str, Any]]:
        return list(self.http.get(f"/api/v1/sessions/{session_id}/history").json())

    def wait(self, session_id: str, statuses: set[str] | None = None, timeout: float = 60) -> dict[str, Any]:
        want = statuses or TERMINAL

        def done() -> dict[str, Any] | None:
            s = self.session(session_id)
            return s if s["status"] in want else None

        return dict(poll(done, timeout, f"session {session_id} to reach {sorted(want)}"))

    def output(
        self, session_id: str, timeout: float = 60, streams: tuple[str, ...] = ("stdout", "stderr")
    ) -> str:
        """A session's whole output of `streams` (its processes' by default, not its image's build),
        once it is complete (it may arrive after the session ends)."""
        text: list[str] = []
        cursor = 0

        def complete() -> bool:
            nonlocal cursor
            page = self.http.get(f"/api/v1/sessions/{session_id}/logs", params={"after": cursor}).json()
            text.extend(ch["data"] for ch in page["chunks"] if ch["stream"] in streams)
            cursor = page["next"]
            return bool(page["complete"])

        poll(complete, timeout, f"the output of {session_id} to be complete", interval=0.05)
        return "".join(text)

    def stored_output(self, session_id: str, timeout: float = 60) -> str:
        """What is kept of a session's output once no more can arrive.  Unlike `output`, which reads
        while the agent still ships, this excludes what a log cap dropped after it was read."""
        self.output(session_id, timeout)
        return self.output(session_id, timeout)

    def so_far(self, session_id: str) -> str:
        """The output stored so far (first page)."""
        page = self.http.get(f"/api/v1/sessions/{session_id}/logs").json()
        return "".join(ch["data"] for ch in page["chunks"])

    def corral(
        self, *args: str, timeout: float = 120, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "CORRAL_URL": self.url, "CORRAL_API_KEY": self.key}
        argv = [sys.executable, "-m", "corral", *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)

    def corral_json(self, *args: str) -> Any:
        done = self.corral(*args, "-o", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)
