"""How the supervisor starts a kernel's first process when it joins cgroups or changes account.

That process joins the kernel's cgroups, drops to its account and becomes the command.  Until it has
dropped privileges it runs as root with an empty environment: the kernel's own (LD_PRELOAD and the
like) takes effect only once it runs as the kernel's account.  It reads that environment from fd 3
(a sealed in-memory file), never from its command line, which every account on the host can read.

It is a small C helper (`spawn.c`, with no C library at all on x86-64 and arm64), compiled once per
source and machine with the machine's C compiler into a cache, loaded from there into a sealed
in-memory file, tried once, and executed from that file alone: the root supervisor never executes a
path anyone else could replace.  Without a compiler, with an unsafe cache, a helper that does not
behave, or CORRAL_AGENT_SPAWN_HELPER=false, it is `python -I -S` running FALLBACK: the same steps and
exit codes, at the cost of a Python interpreter's start-up for every kernel.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

ENV_FD = 3
"""The first process's fd that holds the kernel's environment (NAME=VALUE entries, each NUL-ended)."""
FALLBACK = """
import os, sys
import signal
import warnings  # os.execvpe imports it: after the drop the account may not reach the interpreter's library
for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; a kernel starts with none ignored
    signal.signal(sig, signal.SIG_DFL)
def fail(code, what, arg, exc):
    os.write(2, f"corral: {what} {arg}: {exc.strerror or exc}\\n".encode(errors="replace"))
    os._exit(code)
n = int(sys.argv[1])
files, (uid, gid), command = sys.argv[2:2 + n], sys.argv[2 + n:4 + n], sys.argv[4 + n:]
for name in files:
    try:
        with open(name, "w") as f:
            f.write(str(os.getpid()))
    except OSError as exc:
        fail(126, "cannot join cgroup", name, exc)
if uid != "-":
    try:
        os.setgroups([])
        os.setresgid(int(gid), int(gid), int(gid))
        os.setresuid(int(uid), int(uid), int(uid))
    except OSError as exc:
        fail(126, "cannot set user", uid, exc)
os.lseek(3, 0, os.SEEK_SET)
with os.fdopen(3, "rb") as f:
    env = dict(e.split(b"=", 1) for e in f.read().split(b"\\0") if e)
try:
    os.execvpe(command[0], command, env)
except OSError as exc:
    fail(127 if isinstance(exc, FileNotFoundError) else 126, "cannot execute", command[0], exc)
"""
_MFD_EXEC = 0x0010  # <linux/memfd.h>; Python 3.11 does not name it
_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def _safe_dir(path: Path) -> bool:
    """`path` and every directory above it belong to root or to us, and nobody else may write to them
    (else another account could put its own program in the helper's place)."""
    me = os.geteuid()
    for p in [path, *path.parents]:
        st = os.stat(p, follow_symlinks=False)
        if (
            not stat.S_ISDIR(st.st_mode)
            or st.st_uid not in (0, me)
            or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        ):
            return False
    return True


# spawn.c without any C library (x86-64 and arm64): no start-up before the exec but the exec itself.
_BARE = ("-static", "-nostdlib", "-ffreestanding", "-fno-builtin", "-fno-stack-protector", "-DCORRAL_BARE")


def _compile(source: bytes, out: Path, static: bool = True) -> None:
    """Without a C library where spawn.c can be (and the build behaves), else static when the machine
    has a static libc (no loader at all before the exec), else dynamic."""
    # Found on a PATH of root's own directories: root runs it.
    compiler = shutil.which("cc", path=_SYSTEM_PATH) or shutil.which("gcc", path=_SYSTEM_PATH)
    if compiler is None:
        raise FileNotFoundError("no C compiler")
    src = out.with_suffix(".c")
    src.write_bytes(source)
    for link in (_BARE, ("-static",), ()) if static else ((),):
        done = subprocess.run(
            [compiler, "-O2", *link, "-o", str(out), str(src)],
            capture_output=True,
            timeout=60,
            env={"PATH": _SYSTEM_PATH},
        )
        if done.returncode == 0 and link is _BARE and not _behaves(out.read_bytes()):
            continue  # a toolchain it does not suit: the C library's build instead
        if done.returncode == 0:
            out.chmod(0o700)  # whatever the umask: the cache takes only a file nobody else may write
            with open(out, "rb") as f:
                os.fsync(f.fileno())
            return
    raise OSError(f"cannot compile the spawn helper: {done.stderr.decode(errors='replace')[-300:]}")


def cache_file(source: bytes) -> Path | None:
    """Where the helper built from `source` is kept (None: no usable cache directory)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG rule: a relative value is ignored
        base = os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        return None
    key = hashlib.sha256(source + platform.machine().encode() + platform.libc_ver()[1].encode()).hexdigest()
    return Path(base) / "corral" / f"corral-spawn-{key[:16]}"


def _safe_cache(target: Path) -> bool:
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return _safe_dir(target.parent)
    except OSError:
        return False


def _cached(target: Path) -> bytes | None:
    """The cached helper's bytes, if the cache is safe and the file is ours alone."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        ours = stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022
        return f.read() if ours else None


def _fresh(source: bytes, target: Path | None) -> bytes:
    """Compiled now, in a private directory; kept in the cache when `target` (a safe place) is given."""
    with tempfile.TemporaryDirectory(dir=target.parent if target else None) as tmp:
        out = Path(tmp) / "corral-spawn"
        _compile(source, out)
        binary = out.read_bytes()
        if target is not None:
            os.replace(out, target)  # atomic: a whole file or none
        return binary


def _high(fd: int) -> int:
    """`fd` moved above the first process's standard and environment fds (a supervisor started with
    one of 0-3 closed would otherwise have a file actions' target there)."""
    if fd > ENV_FD:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def _sealed(name: str, data: bytes, executable: bool = False) -> int:
    """An in-memory file holding `data`, sealed against any change, above fd ENV_FD."""
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    try:  # executable even where vm.memfd_noexec asks for the flag (Linux 6.3 and later)
        fd = os.memfd_create(name, flags | _MFD_EXEC if executable else flags)
    except OSError:  # an older kernel, which knows no such flag
        fd = os.memfd_create(name, flags)
    fd = _high(fd)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    return fd


def env_file(env: dict[str, str]) -> int:
    """A sealed in-memory file of `env` for the first process's ENV_FD (the caller closes it)."""
    if any("=" in k or not k or "\0" in k + v for k, v in env.items()):
        raise ValueError("illegal environment variable")  # what posix_spawn would say
    data = b"".join(f"{k}={v}".encode(errors="surrogateescape") + b"\0" for k, v in env.items())
    return _sealed("corral-env", data)


def trial(path: str, *argv: str, env: dict[str, str], timeout: float = 10.0) -> int:
    """Exit code of `path argv`, started as the supervisor starts a kernel's first process; one
    that has not ended after `timeout` seconds is killed (subprocess.TimeoutExpired)."""
    fd = env_file(env)
    try:
        actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_DUP2, fd, ENV_FD)]
        actions += [(os.POSIX_SPAWN_OPEN, std, os.devnull, os.O_RDWR, 0) for std in (0, 1, 2)]
        pid = os.posix_spawn(path, [path, *argv], {}, file_actions=actions)
    finally:
        os.close(fd)
    try:
        ended = os.pidfd_open(pid)
    except OSError:  # Linux before 5.3: waited for without a bound
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    try:
        done = select.select([ended], [], [], timeout)[0]
    finally:
        os.close(ended)
    if not done:
        os.kill(pid, signal.SIGKILL)  # a helper that hangs would hold up the agent's start for ever
        os.waitpid(pid, 0)
        raise subprocess.TimeoutExpired([path, *argv], timeout)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _loaded(binary: bytes) -> str | None:
    """A sealed in-memory copy of `binary`, as a path valid in this process and its children, if it
    behaves here (a noexec memory, another machine's build, another program would fail or fake
    every kernel; the fallback does not)."""
    fd = _sealed("corral-spawn", binary, executable=True)
    path = f"/proc/self/fd/{fd}"
    try:
        # A file joined (/dev/null), the environment read, PATH searched.  Not an account change:
        # root without CAP_SETGID (some containers) would then lose the helper for every kernel,
        # those that keep the agent's account too.
        probe = ["1", os.devnull, "-", "-", "sh", "-c", 'exit "$CORRAL_SPAWN_PROBE"']
        if trial(path, *probe, env={"CORRAL_SPAWN_PROBE": "42", "PATH": _SYSTEM_PATH}) == 42:
            return path
    except (OSError, subprocess.SubprocessError):
        pass
    os.close(fd)
    return None


def _behaves(binary: bytes) -> bool:
    """`binary` passes `_loaded`'s trial (its in-memory copy closed again)."""
    path = _loaded(binary)
    if path is None:
        return False
    os.close(int(path.rsplit("/", 1)[1]))
    return True


def _off() -> bool:
    """The agent's CORRAL_AGENT_SPAWN_HELPER=false, passed to its supervisor as CORRAL_SPAWN_HELPER."""
    return os.environ.get("CORRAL_SPAWN_HELPER", "").lower() in ("off", "0", "no")


def _source_and_cache() -> tuple[bytes, Path | None]:
    source = resources.files("corral.agent").joinpath("spawn.c").read_bytes()
    target = cache_file(source)
    return source, target if target is not None and _safe_cache(target) else None


def prepare() -> None:
    """Builds the helper into the cache, if it is safe and lacks it: run by the agent before it starts
    its supervisor, which then only loads it (a build in the supervisor holds up its commands)."""
    if _off():
        return
    try:
        source, target = _source_and_cache()
        if target is not None and _cached(target) is None:
            _fresh(source, target)
    except (OSError, subprocess.SubprocessError):
        pass  # the supervisor tries again, and says why it falls back


def helper() -> str | None:
    """The helper's path (see `_loaded`), or None to start kernels through FALLBACK."""
    if _off():
        why = "CORRAL_AGENT_SPAWN_HELPER=false"
        print(f"corral supervisor: kernels start through the Python fallback ({why})", file=sys.stderr)
        return None
    try:
        source, target = _source_and_cache()
        cached = _cached(target) if target is not None else None
        loaded = _loaded(cached) if cached is not None else None
        # Missing or broken (a truncated file, another machine's build): built again.
        loaded = loaded or _loaded(_fresh(source, target))
        if loaded is None:
            raise OSError("the helper built here does not behave")
        return loaded
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        print(f"corral supervisor: kernels start through the Python fallback: {exc}", file=sys.stderr)
        return None


def argv(
    helper_path: str | None, procs_files: list[str], user: tuple[int, int] | None, command: list[str]
) -> list[str]:
    """The first process's argv: join `procs_files`, drop to `user` (uid, gid), become `command` with
    the environment on ENV_FD."""
    uid, gid = (str(user[0]), str(user[1])) if user else ("-", "-")
    steps = [str(len(procs_files)), *procs_files, uid, gid, *command]
    if helper_path is not None:
        return [helper_path, *steps]
    return [sys.executable, "-I", "-S", "-c", FALLBACK, *steps]
