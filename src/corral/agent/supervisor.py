"""The agent's supervisor: one process per agent that starts, watches and kills kernels.

Run as `python -m corral.agent.supervisor MODE PARENT [CPU CPU_PARENT ACCT_PARENT]` by the agent,
with pipes on stdin/stdout.
It is a child subreaper, so kernels' daemonised grandchildren (setsid, double fork) are
re-parented to it and stay findable.  Commands arrive as JSON lines on stdin (agent/commands.py:
start, term, kill, ping), and events go back as JSON lines on stdout: {"ev": "started", "key", "pid"} and
{"ev": "exited", "key", "exit_code", "exited_at_ns", "oom_killed", ...}.  End of file on stdin means
the agent died or fenced itself: every kernel tree is killed and the supervisor exits.  And if the
agent stops pinging (SIGSTOP, a hung event loop) past the last `fence_at` it gave, the supervisor
kills every kernel itself: a stopped agent still fences.  A command it cannot carry out fails that
kernel (an "exited" event), never the supervisor.

It is single-threaded (a selector over stdin and a SIGCHLD wake-up pipe), uses posix_spawn (a
fork of this process costs more than a shell's exec), and writes the events of one turn of its
loop in one write: it is on the path of every session.
"""

from __future__ import annotations

import ctypes
import json
import os
import selectors
import signal
import stat
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from corral.agent import spawn
from corral.agent.cgroup import CgroupError, CgroupMode, KernelCgroup
from corral.agent.cgroup_pool import CgroupPool
from corral.agent.commands import COMMANDS, Ping, Start, Term
from corral.agent.proctree import children_of, pgid, rss, signal_all

PR_SET_CHILD_SUBREAPER = 36
TICK = 0.1
FLUSH_EVERY = 0.002
"""Within a batch of commands, events are written at least this often (seconds)."""
# Every signal a kernel's first process gets at its default disposition, whatever the agent inherited
# (a background job or nohup ignores SIGINT, SIGQUIT, SIGHUP; Python ignores SIGPIPE, SIGXFSZ; this
# process ignores SIGTERM): as Slurm's step daemon does.  glibc's posix_spawn alone sets its own two
# reserved signals (32, 33, which no program may use) ignored in the child.
_DEFAULT_SIGNALS = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}


@dataclass
class Kernel:
    """One running kernel, by the agent's key (kernel id and placement generation)."""

    key: str
    pid: int
    cgroup: KernelCgroup | None
    oom_before: int
    mem_limit: int
    grace: float
    started: float = 0.0
    cpu_before: int = 0
    """Its cgroup's CPU counter when it started (a kept cgroup's counts its earlier kernels too)."""
    members: set[int] = field(default_factory=set)
    term_deadline: float | None = None
    by_us: bool = False
    watchdog_oom: bool = False


def _subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Supervisor:
    def __init__(self, mode: CgroupMode) -> None:
        self.mode = mode
        self.kernels: dict[int, Kernel] = {}
        self.out = sys.stdout
        self.fence_at: float | None = None
        self._events: list[str] = []
        self._flushed = time.monotonic()
        # Needed to join cgroups or change account; an unprivileged supervisor without cgroups does neither.
        self.helper = spawn.helper() if os.geteuid() == 0 or mode.kind != "watchdog" else None
        self.cgroups = CgroupPool(mode)

    def emit(self, event: dict[str, Any]) -> None:
        """Queued: `flush` writes a turn's events at once (a write to the pipe per event would be a
        large share of the supervisor's time under load)."""
        self._events.append(json.dumps(event))

    def flush(self) -> None:
        self._flushed = time.monotonic()
        if self._events:
            lines = "\n".join(self._events) + "\n"
            self._events.clear()
            try:
                self.out.write(lines)
                self.out.flush()
            except BrokenPipeError:
                pass  # the agent is gone: stdin's end of file brings the shutdown

    # --- commands --------------------------------------------------------------------------
    def start(self, cmd: Start) -> None:
        key, mem = cmd.key, cmd.mem_limit
        user = (cmd.user.uid, cmd.user.gid) if cmd.user is not None else None
        command, env, out, err = list(cmd.command), dict(cmd.env), cmd.stdout, cmd.stderr
        cgroup = self.cgroups.take(key, mem or None, cmd.cpus or None)
        before = cpu_before = 0
        if cgroup is not None:
            try:
                before, cpu_before = cgroup.baseline()
            except BaseException:
                cgroup.remove()
                raise
        # Opened as root in a directory the kernel's account owns: never through a link it put there,
        # and never waiting on a FIFO (posix_spawn waits for the open, and so would this process).
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
        actions: list[tuple[Any, ...]] = [
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, out, flags, 0o600),
            (os.POSIX_SPAWN_OPEN, 2, err, flags, 0o600),
        ]
        env_fd = None
        try:
            if cgroup is not None or user is not None:
                # Its first process joins the cgroups and drops privileges, then reads the env.
                files = cgroup.procs_files() if cgroup is not None else []
                command = spawn.argv(self.helper, files, user, command)
                env_fd = spawn.env_file(env)
                actions.append((os.POSIX_SPAWN_DUP2, env_fd, spawn.ENV_FD))
                env = {}
            os.chdir(cmd.cwd)
            pid = os.posix_spawnp(
                command[0],
                command,
                env,
                file_actions=actions,
                setsid=True,
                # Default signals and an empty mask: a kernel that cannot get SIGTERM never stops
                # gracefully, only by the SIGKILL after its grace period.
                setsigdef=_DEFAULT_SIGNALS,
                setsigmask=(),
            )
        except (OSError, ValueError, TypeError) as exc:
            # Like a shell: 127 when there is nothing to run, 126 when it cannot be executed.
            code = 127 if isinstance(exc, FileNotFoundError) or not isinstance(exc, OSError) else 126
            self._spawn_failed(cmd, cgroup, code, str(exc))
            return
        finally:
            os.chdir("/")
            if env_fd is not None:
                os.close(env_fd)
        self.kernels[pid] = Kernel(
            key, pid, cgroup, before, mem, cmd.grace, started=time.monotonic(), cpu_before=cpu_before
        )
        self.emit({"ev": "started", "key": key, "pid": pid})

    def _spawn_failed(
        self, cmd: Start, cgroup: KernelCgroup | None, code: int, why: str, said: str = ""
    ) -> None:
        """`said`: the line on its stderr, when it is not that its command cannot start."""
        try:
            # As root, in a directory the kernel's account owns: never through a link or into a FIFO
            # it put there (which would have root write anywhere, or hang this process).
            flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(cmd.stderr, flags)
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    said = said or f"cannot start {cmd.command[0]!r}: {why}"
                    os.write(fd, f"corral: {said}\n".encode())
            finally:
                os.close(fd)
        except OSError:
            pass
        if cgroup is not None:
            cgroup.remove()
        self.emit(
            {
                "ev": "exited",
                "key": cmd.key,
                "exit_code": code,
                "exited_at_ns": time.time_ns(),
                "start_error": why,
                "oom_killed": False,
                "memory_mode": self.mode.kind,
                "cpu_mode": self.mode.cpu,
            }
        )

    def _find(self, key: str) -> Kernel | None:
        return next((k for k in self.kernels.values() if k.key == key), None)

    def term(self, key: str, grace: float | None = None) -> None:
        k = self._find(key)
        if k is not None and k.term_deadline is None:
            k.by_us = True
            # The order's grace (a resource group's, for preemption) over the agent's default.
            wait = k.grace if grace is None else grace
            k.term_deadline = time.monotonic() + wait
            self._signal_tree(k, signal.SIGTERM)
            if wait <= 0:
                self._signal_tree(k, signal.SIGKILL)  # no grace: not even until the next tick

    def kill(self, key: str) -> None:
        k = self._find(key)
        if k is not None:
            k.by_us = True
            self._signal_tree(k, signal.SIGKILL)

    # --- trees -----------------------------------------------------------------------------
    def _tree(self, k: Kernel) -> set[int]:
        if k.cgroup is not None:
            return set(k.cgroup.pids())
        k.members |= children_of({k.pid})
        return {k.pid, *k.members}

    def _signal_tree(self, k: Kernel, sig: int) -> None:
        """Each process of the kernel gets `sig` once. The tree is read before signalling: a SIGTERM
        trap's commands, forked in response, must not get a second SIGTERM meant for their parent."""
        tree = self._tree(k)
        try:
            os.killpg(k.pid, sig)  # the kernel's session/process group (it was started with setsid)
        except (ProcessLookupError, PermissionError):
            pass
        signal_all({p for p in tree if pgid(p) != k.pid}, sig)  # those that left its group (setsid)

    def _finish(self, k: Kernel, status: int) -> None:
        exited_at = time.time_ns()
        # Batch semantics: the kernel ends with its main process; whatever it left behind goes too.
        for _ in range(100):
            tree = self._tree(k)
            rest = tree - {k.pid}
            if not rest:
                break
            signal_all(rest, signal.SIGKILL)
            self._reap()
            self.flush()  # what is known goes out before this waits
            time.sleep(0.005)
        after, usage = 0, None
        if k.cgroup is not None:
            # Read once its cgroup is empty (nothing listed, not even a process given the reaped
            # pid again): final for this kernel, and where they stay until the next kernel kept
            # there joins (its baseline).  One that cannot be read is not kept as a baseline.
            empty = not tree
            try:
                after, usage = k.cgroup.counters()
                k.cgroup.counted = (after, usage) if empty else None
            except (OSError, ValueError):
                after, usage = k.cgroup.oom_kills(), k.cgroup.cpu_usage_ns()
                k.cgroup.counted = None
            self.cgroups.give_back(k.cgroup, empty)
        if usage is not None:
            usage -= k.cpu_before  # a kept cgroup's counter started with its earlier kernels'
        self.emit(
            {
                "ev": "exited",
                "key": k.key,
                "exit_code": os.waitstatus_to_exitcode(status),
                "exited_at_ns": exited_at,
                "oom_killed": k.watchdog_oom or after > k.oom_before,
                "oom_kill_counter": {"before": k.oom_before, "after": after},
                "memory_mode": self.mode.kind,
                "cpu_mode": self.mode.cpu,
                "cpu_seconds": None if usage is None else round(usage / 1e9, 3),
                "wall_seconds": round(time.monotonic() - k.started, 3),
                "cgroup": str(k.cgroup.dirs[0]) if k.cgroup else None,
                "killed_by_corral": k.by_us,
            }
        )

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            k = self.kernels.pop(pid, None)
            if k is not None:
                self._finish(k, status)

    def _tick(self) -> None:
        now = time.monotonic()
        if self.fence_at is not None and now >= self.fence_at and self.kernels:
            self.emit({"ev": "fenced", "kernels": len(self.kernels)})
            for k in self.kernels.values():
                k.by_us = True
                self._signal_tree(k, signal.SIGKILL)
        for k in list(self.kernels.values()):
            if k.term_deadline is not None and now > k.term_deadline:
                self._signal_tree(k, signal.SIGKILL)
            if (k.cgroup is None or k.cgroup.path is None) and k.mem_limit:
                tree = self._tree(k)
                if sum(rss(p) for p in tree) > k.mem_limit:
                    k.watchdog_oom = True
                    signal_all(tree, signal.SIGKILL)

    def shutdown(self) -> None:
        """The agent is gone: nothing it started may outlive it."""
        for k in list(self.kernels.values()):
            k.by_us = True
            self._signal_tree(k, signal.SIGKILL)
        signal_all(children_of({os.getpid()}), signal.SIGKILL)
        deadline = time.monotonic() + 5
        while self.kernels and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.01)
        self.cgroups.clear()  # so that the agent can remove its own (release)

    # --- loop ------------------------------------------------------------------------------
    def run(self) -> int:
        _subreaper()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        sel = selectors.DefaultSelector()
        stdin = sys.stdin.fileno()
        sel.register(stdin, selectors.EVENT_READ, "stdin")
        sel.register(wake_r, selectors.EVENT_READ, "wake")
        buf = b""
        while True:
            for sk, _ in sel.select(TICK):
                if sk.data == "wake":
                    os.read(wake_r, 4096)
                    continue
                data = os.read(stdin, 65536)
                if not data:
                    self.shutdown()
                    self.flush()
                    return 0
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.strip():
                        self.handle(line)
                        # A batch of starts takes a while: kernels that already ended are reported
                        # between them, not after the whole batch (but a few to a write).
                        self._reap()
                        if time.monotonic() - self._flushed >= FLUSH_EVERY:
                            self.flush()
            self._reap()
            self._tick()
            self.flush()

    def handle(self, line: bytes) -> None:
        try:
            cmd = COMMANDS.validate_json(line)
            if isinstance(cmd, Ping):
                self.fence_at = cmd.fence_at  # the agent's monotonic clock is ours too
            elif isinstance(cmd, Start):
                try:
                    self.start(cmd)
                except CgroupError as exc:  # the agent's cgroups, not the command: said so (126)
                    self._spawn_failed(cmd, None, 126, str(exc), f"the kernel's cgroup cannot be made: {exc}")
                except Exception as exc:  # a kernel we cannot start fails alone, never the supervisor
                    self._spawn_failed(cmd, None, 127, repr(exc))
            elif isinstance(cmd, Term):
                self.term(cmd.key, cmd.grace)
            else:
                self.kill(cmd.key)
        except Exception as exc:
            self.emit({"ev": "error", "error": repr(exc)[:500]})


def main() -> int:
    # Only the agent stops us (stdin): a stray SIGTERM or Ctrl-C must not orphan the kernel trees.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return Supervisor(CgroupMode(*sys.argv[1:6])).run()


if __name__ == "__main__":
    sys.exit(main())
