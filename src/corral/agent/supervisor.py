"""One supervisor process per kernel: runs it, enforces memory, and kills its whole tree.

Run as `python -m corral.agent.supervisor SPEC.json`.  It becomes a child subreaper so that
grandchildren that daemonise (setsid, double fork) are re-parented to it and stay findable.
Its stdin is a pipe from the agent: "term" asks for SIGTERM -> grace -> SIGKILL, and end-of-file
(the agent died or fenced) kills the tree at once.  It prints "started PID" when the kernel runs
and writes a result JSON when the kernel's main process has exited and its tree is gone.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import psutil

from corral.agent.cgroup import CgroupMode, KernelCgroup

PR_SET_CHILD_SUBREAPER = 36


def _subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Supervisor:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.mode = CgroupMode(**spec["cgroup"])
        self.cgroup = KernelCgroup(self.mode, spec["kernel_id"]) if self.mode.kind != "watchdog" else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.terminated_by_us = False
        self.watchdog_oom = False
        self.lock = threading.Lock()

    def tree(self) -> list[psutil.Process]:
        try:
            return psutil.Process().children(recursive=True)
        except psutil.Error:
            return []

    def signal_tree(self, sig: int) -> None:
        if self.cgroup:
            self.cgroup.kill_all(sig)
        for p in self.tree():
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass

    def kill_tree(self) -> None:
        for _ in range(50):
            self.signal_tree(signal.SIGKILL)
            if not self.tree() and not (self.cgroup and self.cgroup.pids()):
                return
            time.sleep(0.02)

    def graceful(self) -> None:
        with self.lock:
            self.terminated_by_us = True
        self.signal_tree(signal.SIGTERM)
        deadline = time.monotonic() + float(self.spec.get("grace", 10.0))
        while time.monotonic() < deadline and self.proc and self.proc.poll() is None:
            time.sleep(0.05)
        self.kill_tree()

    def watch_agent(self) -> None:
        """Commands from the agent on stdin; EOF means the agent is gone: nothing may outlive it."""
        for line in sys.stdin:
            if line.strip() == "term":
                threading.Thread(target=self.graceful, daemon=True).start()
        with self.lock:
            self.terminated_by_us = True
        self.kill_tree()

    def watchdog(self, limit: int) -> None:
        while self.proc and self.proc.poll() is None:
            rss = 0
            for p in [psutil.Process(self.proc.pid), *self.tree()]:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            if rss > limit:
                self.watchdog_oom = True
                self.kill_tree()
                return
            time.sleep(0.05)

    def run(self) -> int:
        spec = self.spec
        _subreaper()
        mem = int(spec.get("mem_limit") or 0) or None
        before = 0
        if self.cgroup:
            self.cgroup.create(mem)
            before = self.cgroup.oom_kills()
        cgroup = self.cgroup

        def enter() -> None:
            if cgroup:
                cgroup.join(os.getpid())

        with open(spec["stdout"], "ab") as out, open(spec["stderr"], "ab") as err:
            try:
                self.proc = subprocess.Popen(
                    spec["command"],
                    env=spec["env"],
                    cwd=spec["cwd"],
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=enter,
                )
            except OSError as exc:
                err.write(f"corral: cannot start {spec['command'][0]!r}: {exc}\n".encode())
                return self.finish({"exit_code": 127, "start_error": str(exc)}, before)
        print(f"started {self.proc.pid}", flush=True)
        threading.Thread(target=self.watch_agent, daemon=True).start()
        if mem and not self.cgroup:
            threading.Thread(target=self.watchdog, args=(mem,), daemon=True).start()
        code = self.proc.wait()
        exited_at = time.time_ns()
        # Batch semantics: the kernel ends with its main process; whatever it left behind goes too.
        self.kill_tree()
        self._reap()
        return self.finish({"exit_code": code, "exited_at_ns": exited_at}, before)

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def finish(self, result: dict[str, Any], before: int) -> int:
        after = self.cgroup.oom_kills() if self.cgroup else 0
        result.update(
            oom_killed=self.watchdog_oom or after > before,
            oom_kill_counter={"before": before, "after": after},
            memory_mode=self.mode.kind,
            cgroup=str(self.cgroup.path) if self.cgroup else None,
            killed_by_corral=self.terminated_by_us,
        )
        result.setdefault("exited_at_ns", time.time_ns())
        tmp = spec_path = self.spec["result"]
        with open(tmp + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(tmp + ".tmp", spec_path)
        if self.cgroup:
            self.cgroup.remove()
        return 0


def main() -> int:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    # Only the agent stops us (stdin): a stray SIGTERM or Ctrl-C must not orphan the kernel tree.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return Supervisor(spec).run()


if __name__ == "__main__":
    sys.exit(main())
