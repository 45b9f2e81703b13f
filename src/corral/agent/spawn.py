"""How the supervisor starts a kernel's first process: one small compiled helper, or a shell and setpriv.

The helper (`spawn.c`) joins the kernel's cgroups, drops to its account and becomes the command in one
exec; the shell trampoline, `setpriv` and `env` do the same in four, and cost a kernel twice the CPU
(on this 2-core VM, 2.1 ms against 1.0 including the command's own exec).  Both start as root with an
environment of Corral's (only PATH): the kernel's own (LD_PRELOAD and the like) takes effect only once
the process runs as the kernel's account.

The helper is compiled once per source and machine with the machine's C compiler into a cache,
loaded from there into a sealed in-memory file, tried once, and executed from that file alone: the
root supervisor never executes a path that anyone else could replace.  With no compiler, an unsafe
cache, a helper that does not run, or CORRAL_SPAWN_HELPER=off, kernels start through the shell.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import stat
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

# Joins the kernel's cgroups ($0 files, then the files), then becomes the command (same pid): the limits
# apply from its first byte, and it drops privileges only after joining (an unprivileged process could
# not join a cgroup it does not own).
TRAMPOLINE = 'n=$0; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 126; shift; n=$((n-1)); done; exec "$@"'
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
ENV = shutil.which("env") or "/usr/bin/env"
ROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH of the first process while it is still root (it names its programs by full path)."""
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


def _compile(source: bytes, out: Path) -> None:
    """Static when the machine has a static libc (no loader at all before the exec), else dynamic."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise FileNotFoundError("no C compiler")
    src = out.with_suffix(".c")
    src.write_bytes(source)
    for static in (["-static"], []):
        done = subprocess.run(
            [compiler, "-O2", *static, "-o", str(out), str(src)],
            capture_output=True,
            timeout=60,
            env={"PATH": ROOT_PATH},
        )
        if done.returncode == 0:
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


def _loaded(binary: bytes) -> str | None:
    """A sealed in-memory copy of `binary`, as a path valid in this process and its children, if it
    runs here (a noexec memory, another machine's build would fail every kernel; the shell does not)."""
    fd = os.memfd_create("corral-spawn", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, binary)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    path = f"/proc/self/fd/{fd}"
    try:
        tried = subprocess.run([path, "0", "-", "-", "0", "/bin/true"], env={}, timeout=10, pass_fds=(fd,))
        if tried.returncode == 0:
            return path
    except (OSError, subprocess.SubprocessError):
        pass
    os.close(fd)
    return None


def helper() -> str | None:
    """The helper's path (see `_loaded`), or None to start kernels through the shell."""
    if os.environ.get("CORRAL_SPAWN_HELPER", "").lower() in ("off", "0", "no"):
        return None
    try:
        source = resources.files("corral.agent").joinpath("spawn.c").read_bytes()
        target = cache_file(source)
        if target is not None and not _safe_cache(target):
            target = None
        cached = _cached(target) if target is not None else None
        loaded = _loaded(cached) if cached is not None else None
        # Missing or broken (a truncated file, another machine's build): built again.
        return loaded or _loaded(_fresh(source, target))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def argv(
    helper_path: str | None,
    procs_files: list[str],
    user: tuple[int, int] | None,
    command: list[str],
    env: dict[str, str],
) -> tuple[list[str], dict[str, str]]:
    """The first process's argv and environment: join `procs_files`, drop to `user` (uid, gid),
    become `command` with `env`."""
    if not procs_files and not user:
        return command, env
    if any("=" in k or not k for k in env):
        raise ValueError("illegal environment variable name")  # as posix_spawn would say
    pairs = [f"{k}={v}" for k, v in env.items()]
    if helper_path is not None:
        uid, gid = (str(user[0]), str(user[1])) if user else ("-", "-")
        return [
            helper_path,
            str(len(procs_files)),
            *procs_files,
            uid,
            gid,
            str(len(pairs)),
            *pairs,
            *command,
        ], {}
    if user:
        command = [
            ENV,
            "-i",
            "--",
            *pairs,
            *command,
        ]  # runs as the account: the kernel's env applies from here
        command = [SETPRIV, f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", "--", *command]
        env = {"PATH": ROOT_PATH}
    if procs_files:
        command = ["/bin/sh", "-c", TRAMPOLINE, str(len(procs_files)), *procs_files, *command]
    return command, env
