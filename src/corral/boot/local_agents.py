"""`corral up`'s local agents, supervised: a dead agent is logged, cleared away and started again.

An agent that dies (kill -9, the host's OOM killer, a crash) is restarted with the same id, after a
back-off of 1 s doubling to 60 s (back to 1 s once an incarnation has lived 60 s), forever.  Before
the restart, whatever the dead incarnation left is gone: `corral up` is a child subreaper, so the
dead agent's supervisor and its kernels are re-parented to it; the supervisor sees end-of-file and
kills its kernels, and what is still alive after LEFTOVER_GRACE is killed here.  Only then does the
new incarnation register, under the same instance token: `corral up` vouches that the old one is
dead, so the manager gives it a new epoch at once (fencing the old one) and ends the old kernels
("agent restarted"), whose sessions are then decided by the usual rules.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import structlog

log = structlog.get_logger("corral.up")

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
FIRST_DELAY = 1.0
MAX_DELAY = 60.0
STABLE_AFTER = 60.0
"""An incarnation that lived this long resets the back-off."""
SCAN_EVERY = 5.0
"""Seconds between looks for orphans while no agent is down (a supervisor that died alone leaves its
kernels' zombies to us, as the subreaper)."""
LEFTOVER_GRACE = 5.0
"""Seconds a dead agent's supervisor has to kill its kernels and exit before it is killed here."""


def _die_with_parent() -> None:
    """In the agent child: SIGTERM when `corral up` dies, even by SIGKILL (no orphaned agents)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _become_subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _reaped(pid: int) -> bool:
    """Reaps the child if it has exited (True), else False."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        return True


@dataclass
class LocalAgent:
    """One agent id and its current incarnation."""

    agent_id: str
    cmd: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    delay: float = FIRST_DELAY
    restart_at: float = 0.0
    restarts: int = 0


@dataclass
class LocalAgents:
    """Start with `start()`, call `tick()` often, end with `shutdown()` (idempotent)."""

    n: int
    url: str
    token: str
    kernels: Path
    clock: Callable[[], float] = time.monotonic
    agents: list[LocalAgent] = field(default_factory=list)
    _leftovers_since: float | None = None
    _next_scan: float = 0.0
    _closed: bool = False

    def start(self) -> None:
        _become_subreaper()
        for i in range(1, self.n + 1):
            agent_id = f"local-{i}"
            # The same instance for every incarnation: see the module's docstring.
            env = dict(
                os.environ, CORRAL_AGENT_TOKEN=self.token, CORRAL_AGENT_INSTANCE=f"up-{uuid.uuid4().hex}"
            )
            cmd = [sys.executable, "-m", "corral", "agent", "--manager", self.url, "--id", agent_id]
            cmd += ["--work-dir", str(self.kernels / "agents" / agent_id)]
            self.agents.append(LocalAgent(agent_id, cmd, env))
        for a in self.agents:
            self._spawn(a)

    def _spawn(self, a: LocalAgent) -> None:
        a.proc = subprocess.Popen(a.cmd, env=a.env, preexec_fn=_die_with_parent)
        a.started = self.clock()

    def tick(self) -> None:
        """Notice deaths, clear what they left, restart those whose back-off has passed."""
        if self._closed:
            return
        now = self.clock()
        for a in self.agents:
            if a.proc is not None and (code := a.proc.poll()) is not None:
                lived = now - a.started
                if lived >= STABLE_AFTER:
                    a.delay = FIRST_DELAY
                a.restart_at = now + a.delay
                log.error(
                    "local agent died; restarting it",
                    agent=a.agent_id,
                    pid=a.proc.pid,
                    status=describe_exit(code),
                    lived_s=round(lived, 1),
                    restart_in_s=a.delay,
                )
                a.delay = min(a.delay * 2, MAX_DELAY)
                a.proc = None
        down = any(a.proc is None for a in self.agents)
        if (down or self._leftovers_since is not None or now >= self._next_scan) and self._clear_leftovers(
            now
        ):
            return  # a new incarnation starts only once nothing of an old one is left
        for a in self.agents:
            if a.proc is None and now >= a.restart_at:
                a.restarts += 1
                self._spawn(a)
                log.warning("local agent restarted", agent=a.agent_id, pid=a.proc.pid if a.proc else None)

    def _clear_leftovers(self, now: float) -> bool:
        """Reap and kill children that are not live agents (a dead agent's supervisor and kernels);
        True while any is left.  They get LEFTOVER_GRACE from when the first was seen, then every
        one is killed, those re-parented to us by that kill included."""
        self._next_scan = now + SCAN_EVERY
        ours = {a.proc.pid for a in self.agents if a.proc is not None}
        try:
            children = [c for c in psutil.Process().children() if c.pid not in ours]
        except psutil.Error:
            return False
        left = [c.pid for c in children if not _reaped(c.pid)]
        if not left:
            self._leftovers_since = None
            return False
        if self._leftovers_since is None:
            self._leftovers_since = now
        if now - self._leftovers_since >= LEFTOVER_GRACE:
            log.warning("killing what a dead agent left", pids=left)
            for pid in left:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)  # a kernel leads its own group
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        return True

    def shutdown(self) -> None:
        """SIGTERM to every agent (they stop their kernels and leave), SIGKILL after 20 s."""
        if self._closed:
            return
        self._closed = True
        procs = [a.proc for a in self.agents if a.proc is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
