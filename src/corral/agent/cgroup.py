"""Limits per kernel. Memory: cgroup v2, cgroup v1, or none (the supervisor's psutil watchdog).
CPU: the cgroup v2 or v1 cpu controller (quota = requested cores), or not enforced.

Only the small file operations live here; the agent picks the modes at start-up and logs them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
from dataclasses import dataclass, replace
from pathlib import Path

V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/memory")
V1_CPU = Path("/sys/fs/cgroup/cpu")
V1_ACCT = Path("/sys/fs/cgroup/cpuacct")
CPU_PERIOD_US = 100_000
KEEP_CHARGE = 4 << 20
"""Bytes an emptied kernel cgroup may still have charged and be kept for the next kernel, which is
charged for them (a short kernel leaves 0.4-1.2 MB: kernel memory, page cache it read, whatever it
left in tmpfs); above, it is removed."""


@dataclass(frozen=True)
class CgroupMode:
    """Where kernels' cgroups go, and which file format they use."""

    kind: str
    """'cgroup2', 'cgroup1' or 'watchdog'."""
    parent: str
    """Directory under which each kernel gets its own memory cgroup ('' for watchdog)."""
    cpu: str = "none"
    """'cgroup2', 'cgroup1' or 'none' (CPU counted by the scheduler but not enforced)."""
    cpu_parent: str = ""
    """Directory of the kernels' cpu cgroups (the memory one on cgroup v2)."""
    acct_parent: str = ""
    """cgroup v1: directory of the kernels' cpuacct cgroups, where their CPU usage is read."""

    def argv(self) -> list[str]:
        """How the supervisor is told (positional: kind, parent, cpu, cpu_parent, acct_parent)."""
        return [self.kind, self.parent, self.cpu, self.cpu_parent, self.acct_parent]

    @property
    def any(self) -> bool:
        """Kernels get cgroups at all (else the supervisor tracks their trees by /proc ancestry)."""
        return bool(self.parent or self.cpu_parent)


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


def _v2_enable(parent: Path, controller: str) -> bool:
    try:
        (parent / "cgroup.subtree_control").write_text(f"+{controller}")
    except OSError:
        return False
    return True


def detect_cpu(mode: CgroupMode, name: str) -> tuple[CgroupMode, str]:
    """`mode` with the best available CPU enforcement, and a sentence saying why."""
    controllers = V2_ROOT / "cgroup.controllers"
    if mode.kind == "cgroup2" and "cpu" in controllers.read_text().split():
        if _v2_enable(Path(mode.parent), "cpu"):
            return replace(mode, cpu="cgroup2", cpu_parent=mode.parent), "cgroup v2 cpu controller"
    if _writable_dir(V1_CPU) and (V1_CPU / "cpu.cfs_quota_us").exists():
        cpu = V1_CPU / name
        cpu.mkdir(exist_ok=True)
        acct = ""
        if not (V1_CPU / "cpuacct.usage").exists() and _writable_dir(V1_ACCT):
            (V1_ACCT / name).mkdir(exist_ok=True)  # not co-mounted: usage is read from its own tree
            acct = str(V1_ACCT / name)
        return replace(mode, cpu="cgroup1", cpu_parent=str(cpu), acct_parent=acct), "cgroup v1 cpu controller"
    return mode, "no writable cpu cgroup: CPU is counted by the scheduler but not enforced"


def kernel_cgroups(mode: CgroupMode) -> list[KernelCgroup]:
    """Every kernel cgroup under the agent's parents: its kernels', and those its supervisor keeps
    emptied for the next ones (named after whichever kernel made them)."""
    names: set[str] = set()
    for parent in {mode.parent, mode.cpu_parent, mode.acct_parent} - {""}:
        try:
            names |= {e.name for e in os.scandir(parent) if e.is_dir(follow_symlinks=False)}
        except OSError:
            pass
    return [KernelCgroup(mode, name) for name in sorted(names)]


class CgroupError(OSError):
    """A kernel's cgroups cannot be made or limited: the agent's failure, not the command's, and
    said as such (a bare FileNotFoundError read as if the command were missing)."""


def ensure_parents(mode: CgroupMode) -> str | None:
    """None when the agent's parent cgroups are there and writable, each made again if someone
    removed it; else why no kernel can start here.  Only the agent's own directories are made, never
    an ancestor: a removed hierarchy or delegated slice is the host's, and kernels must not escape
    it.  A stat each when all is well (the agent checks every second, the supervisor on a failure)."""
    for parent in dict.fromkeys(p for p in (mode.parent, mode.cpu_parent, mode.acct_parent) if p):
        path = Path(parent)
        if not path.is_dir():
            try:
                path.mkdir(exist_ok=True)
                if mode.kind == "cgroup2":  # as detect and detect_cpu enabled them
                    wanted = "+memory +cpu" if mode.cpu == "cgroup2" else "+memory"
                    (path / "cgroup.subtree_control").write_text(wanted)
            except OSError as exc:
                return f"the agent's cgroup {path} is gone and cannot be made again: {exc.strerror or exc}"
        if not os.access(path, os.W_OK):
            try:
                how = "on a read-only mount" if os.statvfs(path).f_flag & os.ST_RDONLY else "denied"
            except OSError as exc:
                how = exc.strerror or str(exc)
            return f"the agent's cgroup {path} is not writable ({how})"
    return None


def release(mode: CgroupMode) -> None:
    """Remove the agent's (empty) parent cgroups when it stops; a busy one is left as it is."""
    for parent in {mode.parent, mode.cpu_parent, mode.acct_parent} - {""}:
        try:
            Path(parent).rmdir()
        except OSError:
            pass


class KernelCgroup:
    """One kernel's cgroups: memory and cpu (one directory on v2), plus cpuacct when v1 splits it."""

    def __init__(self, mode: CgroupMode, kernel_id: str) -> None:
        self.mode = mode
        self.path = Path(mode.parent) / kernel_id if mode.parent else None
        cpu = Path(mode.cpu_parent) / kernel_id if mode.cpu_parent else None
        self.cpu_path = cpu
        self.acct_path = Path(mode.acct_parent) / kernel_id if mode.acct_parent else cpu
        # Every directory it joins; the first is where its processes are listed.
        self.dirs = list(dict.fromkeys(p for p in (self.path, cpu, self.acct_path) if p is not None))
        self.limits: tuple[int | None, float | None] | None = None
        """(memory, cpus) as last written, once all of it was."""
        self.counted: tuple[int, int | None] | None = None
        """(oom_kills, cpu_usage_ns) read once it was empty, where they stay until a process joins:
        the next kernel's baseline without reading them again (`baseline`)."""
        self._swapped = _swap_accounted(mode)
        self._procs = os.path.join(self.dirs[0], "cgroup.procs") if self.dirs else ""

    @classmethod
    def of(cls, mode: CgroupMode, kernel_id: str) -> KernelCgroup | None:
        return cls(mode, kernel_id) if mode.any else None

    def create(self, mem_limit: int | None, cpus: float | None = None) -> None:
        """Made with its limits, its parents made again first if they were removed; CgroupError
        saying why not."""
        try:
            try:
                self._mkdirs()
            except FileNotFoundError:
                why = ensure_parents(self.mode)
                if why is not None:
                    raise CgroupError(why) from None
                self._mkdirs()
            self.limit(mem_limit, cpus, lift=False)
        except CgroupError:
            raise
        except OSError as exc:
            where = f" {exc.filename}" if exc.filename else ""
            raise CgroupError(f"cannot write{where}: {exc.strerror or exc}") from exc

    def _mkdirs(self) -> None:
        for d in self.dirs:
            d.mkdir(exist_ok=True)

    def check(self) -> None:
        """FileNotFoundError when one of its directories is gone: an emptied cgroup kept for the
        next kernel can be removed behind the supervisor's back (a stat each)."""
        for d in self.dirs:
            if not os.path.isdir(d):
                raise FileNotFoundError(errno.ENOENT, "a kept kernel cgroup was removed", str(d))

    def limit(self, mem_limit: int | None, cpus: float | None, lift: bool = True) -> None:
        """Both limits for the kernel about to run here; `lift`: a limit it does not ask for is
        lifted (a reused cgroup still holds its previous kernel's; a fresh one has none)."""
        if (mem_limit, cpus) == self.limits:
            return  # a kept cgroup whose last kernel asked for the same
        self.limits = None  # unknown until every write is done
        if self.path is not None and (mem_limit or lift):
            self._limit_memory(self.path, mem_limit)
        if self.cpu_path is not None and (cpus or lift):
            quota = max(1000, int(cpus * CPU_PERIOD_US)) if cpus else None
            if self.mode.cpu == "cgroup2":
                (self.cpu_path / "cpu.max").write_text(f"{quota or 'max'} {CPU_PERIOD_US}")
            elif quota is None:
                (self.cpu_path / "cpu.cfs_quota_us").write_text("-1")
            else:
                (self.cpu_path / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                (self.cpu_path / "cpu.cfs_quota_us").write_text(str(quota))
        self.limits = (mem_limit, cpus)

    def _limit_memory(self, path: Path, mem_limit: int | None) -> None:
        if self.mode.kind == "cgroup2":
            (path / "memory.max").write_text(str(mem_limit or "max"))
            if self._swapped:
                (path / "memory.swap.max").write_text("0" if mem_limit else "max")
            return
        memsw = path / "memory.memsw.limit_in_bytes"
        if self._swapped:
            # memory+swap may never be below memory: lifted first, so either may change next.
            memsw.write_text("-1")
        (path / "memory.limit_in_bytes").write_text(str(mem_limit or -1))
        if self._swapped and mem_limit:
            # With swap accounting, cap memory+swap too, or the kernel swaps instead of OOMing.
            try:
                memsw.write_text(str(mem_limit))
            except OSError:
                pass

    def charge(self) -> int:
        """Bytes charged to its memory cgroup, swap included (0 without one)."""
        if self.path is None:
            return 0
        if self.mode.kind == "cgroup2":
            swap = int(_read(os.path.join(self.path, "memory.swap.current"))) if self._swapped else 0
            return int(_read(os.path.join(self.path, "memory.current"))) + swap
        # cgroup v1 counts memory and swap together where it accounts swap.
        name = "memory.memsw.usage_in_bytes" if self._swapped else "memory.usage_in_bytes"
        return int(_read(os.path.join(self.path, name)))

    def reusable(self, empty: bool = False) -> bool:
        """Empty (`empty`: seen so by the caller, once nothing could join it), and holding at most
        KEEP_CHARGE: what another kernel may start in as it is."""
        try:
            return (empty or not self.pids()) and self.charge() <= KEEP_CHARGE
        except (OSError, ValueError):
            return False

    def procs_files(self) -> list[str]:
        """The files a kernel's first process writes its pid to, before it becomes the command."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def join(self, pid: int) -> None:
        for f in self.procs_files():
            Path(f).write_text(str(pid))

    def baseline(self) -> tuple[int, int]:
        """(oom_kills, cpu_usage_ns or 0) before a kernel starts here: as counted when its last
        kernel's ended (nothing ran since), else read now."""
        counted, self.counted = self.counted, None
        if counted is not None:
            return counted[0], counted[1] or 0
        return self.oom_kills(), self.cpu_usage_ns() or 0

    def counters(self) -> tuple[int, int | None]:
        """(oom_kills, cpu_usage_ns) as they are now; raises OSError or ValueError when one cannot
        be read (cpu_usage_ns is None only where CPU is not accounted)."""
        return self._oom_kills(), self._cpu_usage_ns()

    def oom_kills(self) -> int:
        """The cgroup's oom_kill counter (v2 memory.events, v1 memory.oom_control)."""
        try:
            return self._oom_kills()
        except OSError:
            return 0

    def _oom_kills(self) -> int:
        if self.path is None:
            return 0
        name = "memory.events" if self.mode.kind == "cgroup2" else "memory.oom_control"
        return _field(_read(os.path.join(self.path, name)), b"oom_kill") or 0

    def cpu_usage_ns(self) -> int | None:
        """CPU time its processes used (v2 cpu.stat usage_usec, v1 cpuacct.usage); None if unknown."""
        try:
            return self._cpu_usage_ns()
        except (OSError, ValueError):
            return None

    def _cpu_usage_ns(self) -> int | None:
        if self.mode.cpu == "cgroup2" and self.cpu_path is not None:
            usec = _field(_read(os.path.join(self.cpu_path, "cpu.stat")), b"usage_usec")
            if usec is None:
                raise ValueError("cpu.stat has no usage_usec")
            return usec * 1000
        if self.mode.cpu == "cgroup1" and self.acct_path is not None:
            return int(_read(os.path.join(self.acct_path, "cpuacct.usage")))
        return None

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in _read(self._procs).split()]
        except OSError:
            return []

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):  # gone, or not ours to kill (an unprivileged agent)
                pass

    def remove(self) -> None:
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass


def _read(path: str) -> bytes:
    """A kernel file, whole: several per kernel start on the supervisor's path, where a text file
    object's layers cost more than the reads (a quarter of its CPU was Path.read_text).  Read to
    its end: a read of these files returns a page at most (cgroup.procs of a large tree is longer)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = [os.read(fd, 65536)]
        while chunks[-1]:
            chunks.append(os.read(fd, 65536))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _field(text: bytes, key: bytes) -> int | None:
    """The value of `key` in a flat-keyed cgroup file ("key value" lines)."""
    for line in text.splitlines():
        name, _, value = line.partition(b" ")
        if name == key:
            return int(value)
    return None


def _swap_accounted(mode: CgroupMode) -> bool:
    """Whether the kernel accounts swap in memory cgroups (v2 memory.swap.*, v1 memory.memsw.*):
    the host's setting, so the agent's parent has the files when every kernel cgroup does."""
    if mode.kind not in ("cgroup2", "cgroup1") or not mode.parent:
        return False
    name = "memory.swap.current" if mode.kind == "cgroup2" else "memory.memsw.usage_in_bytes"
    return os.path.exists(os.path.join(mode.parent, name))
