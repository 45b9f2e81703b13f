"""How the supervisor starts a kernel's first process: one small compiled helper, or a shell and setpriv.

The helper (`spawn.c`) joins the kernel's cgroups, drops to its user and becomes the command in one exec;
the shell trampoline followed by `setpriv` does the same in three, and cost a kernel twice the CPU (on
this 2-core VM, 2.1 ms against 1.0 including the command's own exec).  The helper is compiled once per
source with the machine's C compiler into a private cache; with no compiler, or with
CORRAL_SPAWN_HELPER=off, kernels start through the shell, with the same behaviour.
"""

from __future__ import annotations

import hashlib
import os
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


def _private(path: Path) -> bool:
    """Ours alone: this process runs the helper before dropping privileges, so nobody else may swap it."""
    st = path.stat()
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "corral"


def helper() -> str | None:
    """The compiled helper's path, building it if needed; None to start kernels through the shell."""
    if os.environ.get("CORRAL_SPAWN_HELPER", "").lower() in ("off", "0", "no"):
        return None
    source = resources.files("corral.agent").joinpath("spawn.c").read_bytes()
    cache = _cache()
    target = cache / f"corral-spawn-{hashlib.sha256(source).hexdigest()[:16]}"
    try:
        if target.exists():
            return str(target) if _private(cache) and _private(target) else None
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            return None
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(cache):
            return None
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            src, out = Path(tmp) / "spawn.c", Path(tmp) / "corral-spawn"
            src.write_bytes(source)
            subprocess.run(
                [compiler, "-O2", "-o", str(out), str(src)], check=True, capture_output=True, timeout=60
            )
            out.chmod(0o700)
            os.replace(out, target)  # atomic: two agents building at once both end with a whole file
        return str(target)
    except (OSError, subprocess.SubprocessError):
        return None


def argv(
    helper_path: str | None, procs_files: list[str], user: tuple[int, int] | None, command: list[str]
) -> list[str]:
    """The first process's argv: join `procs_files`, drop to `user` (uid, gid), become `command`."""
    if not procs_files and not user:
        return command
    if helper_path is not None:
        uid, gid = (str(user[0]), str(user[1])) if user else ("-", "-")
        return [helper_path, str(len(procs_files)), *procs_files, uid, gid, *command]
    if user:
        command = [SETPRIV, f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", "--", *command]
    if procs_files:
        command = ["/bin/sh", "-c", TRAMPOLINE, str(len(procs_files)), *procs_files, *command]
    return command
