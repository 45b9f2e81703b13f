"""Kernel starts: what one costs the machine through an agent's supervisor, against a bare spawn.

    .venv/bin/python bench/spawn.py [--n 500] [--command true]

Drives a real supervisor (`corral.agent.supervisor`) through its pipes as an agent does, in the
cgroup mode an agent would pick here, kernels running as the `corral` account when this runs as
root. One start at a time, each waited for to its exit; prints the machine's CPU per start (all
processes: the supervisor, the spawn helper, the command, the OS's work for them) and the wall time
from the start command to the exit event, then the same for a bare `posix_spawn` of the command from
this process. No manager or database: this is the kernel-start path alone, which is what holds
bench/throughput.py on a 2-core machine (README, Benchmarks). It counts every process's CPU: run
it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import pct, scratch  # noqa: E402
from bench.cpu import busy_seconds  # noqa: E402
from corral.agent.cgroup import CgroupMode, detect, detect_cpu, release  # noqa: E402


def measure(n: int, one: Callable[[int], None]) -> tuple[float, float, float]:
    """(machine CPU ms per call, wall p50 ms, wall p95 ms) of `one` called n times."""
    walls = []
    cpu = busy_seconds()
    for i in range(n):
        t = time.perf_counter()
        one(i)
        walls.append(time.perf_counter() - t)
    per = (busy_seconds() - cpu) / n
    return 1000 * per, 1000 * pct(walls, 0.5), 1000 * pct(walls, 0.95)


class Supervisor:
    def __init__(self, mode: CgroupMode, work: Path) -> None:
        self.work = work
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "corral.agent.supervisor", *mode.argv()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        account = pwd.getpwnam("corral") if os.geteuid() == 0 and _has("corral") else None
        self.user = {"uid": account.pw_uid, "gid": account.pw_gid} if account else None

    def run(self, i: int, command: list[str]) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        start = {
            "op": "start",
            "key": f"bench-{i}.0",
            "command": command,
            "user": self.user,
            "env": {"PATH": "/usr/bin:/bin"},
            "cwd": str(self.work),
            "stdout": str(self.work / "stdout"),
            "stderr": str(self.work / "stderr"),
            "cpus": 1,
        }
        self.proc.stdin.write(json.dumps(start) + "\n")
        self.proc.stdin.flush()
        while True:
            event = json.loads(self.proc.stdout.readline())
            if event.get("ev") == "exited":
                if event.get("exit_code") != 0:
                    raise SystemExit(f"{command} failed under the supervisor: {event}")
                return
            if event.get("ev") == "error":
                raise SystemExit(f"the supervisor refused a start: {event}")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # end of file: it kills what runs, removes the cgroups it kept
        self.proc.wait(timeout=30)


def _has(account: str) -> bool:
    try:
        pwd.getpwnam(account)
    except KeyError:
        return False
    return True


def say(what: str, cpu: float, p50: float, p95: float) -> None:
    print(f"{what}: {cpu:.2f} ms CPU per start, wall p50 {p50:.2f} ms p95 {p95:.2f} ms", flush=True)


def bare(command: list[str]) -> None:
    pid = os.posix_spawnp(command[0], command, {"PATH": "/usr/bin:/bin"})
    os.waitpid(pid, 0)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=500, help="starts to time (after 20 not counted)")
    parser.add_argument("--command", default="true", help="the kernel's command (a program on PATH)")
    args = parser.parse_args()
    if args.n < 1:
        raise SystemExit("--n must be 1 or more")
    program = shutil.which(args.command, path="/usr/bin:/bin")
    if program is None:
        raise SystemExit(f"--command: {args.command!r} is not on /usr/bin:/bin")
    command = [program]
    with ExitStack() as stack:
        work = scratch("corral-spawn-", stack)
        work.chmod(0o711)
        name = f"corral-bench-spawn-{os.getpid()}"
        mode, why = detect(name)
        mode, cpu_why = detect_cpu(mode, name)
        stack.callback(release, mode)
        print(f"cores: {os.cpu_count()}  memory: {mode.kind} ({why})  cpu: {mode.cpu} ({cpu_why})")
        supervisor = Supervisor(mode, work)
        try:
            for i in range(20):  # the helper compiled and loaded, the first cgroups made
                supervisor.run(i, command)
            cpu, p50, p95 = measure(args.n, lambda i: supervisor.run(20 + i, command))
        finally:
            supervisor.close()
        runs_as = f"as uid {supervisor.user['uid']}" if supervisor.user else "as this account"
        say(f"through the supervisor ({runs_as})", cpu, p50, p95)
        for _ in range(20):
            bare(command)
        cpu, p50, p95 = measure(args.n, lambda i: bare(command))
        say("bare posix_spawn from this process", cpu, p50, p95)
    return 0


if __name__ == "__main__":
    sys.exit(main())
