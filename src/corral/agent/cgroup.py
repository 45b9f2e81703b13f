"""Memory enforcement per kernel: cgroup v2, cgroup v1, or none (the supervisor's psutil watchdog).

Only the small file operations live here; the agent picks a mode at start-up and logs it.
"""

from __future__ import annotations

import hashlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/memory")


@dataclass(frozen=True)
class CgroupMode:
    """Where kernels' cgroups go, and which file format they use."""

    kind: str
    """'cgroup2', 'cgroup1' or 'watchdog'."""
    parent: str
    """Directory under which each kernel gets its own cgroup ('' for watchdog)."""


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def parent_name(agent_id: str, work_dir: Path) -> str:
    """Unique per installation on a host: two `corral up` (other HOME, same agent ids) never share
    a parent cgroup, so stopping one cannot remove the other's."""
    install = hashlib.sha1(str(work_dir.resolve()).encode()).hexdigest()[:10]
    return f"corral-{install}-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in agent_id)


def detect(name: str, prefer: str = "auto") -> tuple[CgroupMode, str]:
    """The best available mode and a sentence saying why (for the start-up log)."""
    controllers = V2_ROOT / "cgroup.controllers"
    v2_ok = controllers.is_file() and "memory" in controllers.read_text().split() and _writable_dir(V2_ROOT)
    v1_ok = _writable_dir(V1_ROOT) and (V1_ROOT / "memory.limit_in_bytes").exists()
    if prefer in ("auto", "cgroup2") and v2_ok:
        parent = V2_ROOT / name
        parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").write_text("+memory")
        return CgroupMode("cgroup2", str(parent)), "cgroup v2 with the memory controller"
    if prefer in ("auto", "cgroup1") and v1_ok:
        parent = V1_ROOT / name
        parent.mkdir(exist_ok=True)
        why = "cgroup v1 memory controller" + (
            "" if prefer == "cgroup1" else " (v2 lacks the memory controller)"
        )
        return CgroupMode("cgroup1", str(parent)), why
    why = "no writable memory cgroup: psutil watchdog enforces memory limits"
    return CgroupMode("watchdog", ""), why if prefer in (
        "auto",
        "watchdog",
    ) else why + f" ({prefer} unavailable)"


def release(mode: CgroupMode) -> None:
    """Remove the agent's (empty) parent cgroup when it stops; a busy one is left as it is."""
    if mode.parent:
        try:
            Path(mode.parent).rmdir()
        except OSError:
            pass


class KernelCgroup:
    """One kernel's cgroup (v1 or v2)."""

    def __init__(self, mode: CgroupMode, kernel_id: str) -> None:
        self.mode = mode
        self.path = Path(mode.parent) / kernel_id

    def create(self, mem_limit: int | None) -> None:
        self.path.mkdir(exist_ok=True)
        if not mem_limit:
            return
        if self.mode.kind == "cgroup2":
            (self.path / "memory.max").write_text(str(mem_limit))
            swap = self.path / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")
        else:
            (self.path / "memory.limit_in_bytes").write_text(str(mem_limit))
            memsw = self.path / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                # With swap accounting, cap memory+swap too, or the kernel swaps instead of OOMing.
                try:
                    memsw.write_text(str(mem_limit))
                except OSError:
                    pass

    def join(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        """The cgroup's oom_kill counter (v2 memory.events, v1 memory.oom_control)."""
        name = "memory.events" if self.mode.kind == "cgroup2" else "memory.oom_control"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except OSError:
            pass
        return 0

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def remove(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass
