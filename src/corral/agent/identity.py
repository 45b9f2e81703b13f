"""Who kernels run as. An agent started as root never runs a kernel as root by accident: each kernel
gets its owner's mapped uid/gid, else the agent's default account; root needs an explicit flag.

Kernel files live under directories every kernel's account can traverse (mode 711) but not list,
and each kernel's own directories are its account's alone (mode 700): another user's kernel cannot
read them.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.protocol.orders import RunAs

DEFAULT_ACCOUNT = "corral"


class IdentityError(Exception):
    """The agent cannot run kernels as configured (a start-up error with the fix in its message)."""


@dataclass(frozen=True)
class Account:
    """A uid/gid a kernel runs as."""

    uid: int
    """Its user id."""
    gid: int
    """Its primary group id (its only group: supplementary groups are cleared)."""
    name: str
    """Its login name, or the uid as text when the host has no such user."""
    home: str
    """Its home directory when that exists and is its own, else ''."""

    def describe(self) -> str:
        return f"{self.name} (uid {self.uid})"


def account_of(uid: int, gid: int | None = None) -> Account:
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return Account(uid, uid if gid is None else gid, str(uid), "")
    home = entry.pw_dir if os.path.isdir(entry.pw_dir) and os.stat(entry.pw_dir).st_uid == uid else ""
    return Account(uid, entry.pw_gid if gid is None else gid, entry.pw_name, home)


@dataclass(frozen=True)
class KernelIdentity:
    """The agent's rule for choosing each kernel's account."""

    default: Account
    """Kernels of owners with no mapping run as this account."""
    switches: bool
    """The agent is root and changes each kernel's uid (else every kernel runs as the agent's user)."""

    @classmethod
    def resolve(cls, account: str, allow_root: bool) -> KernelIdentity:
        """At start-up. Raises IdentityError when a root agent has no unprivileged account to use."""
        if os.geteuid() != 0:
            return cls(account_of(os.geteuid(), os.getegid()), switches=False)
        if allow_root:
            return cls(account_of(0, 0), switches=True)
        try:
            entry = pwd.getpwnam(account)
        except KeyError:
            raise IdentityError(
                f"the kernel account {account!r} does not exist: create it (`corral up` does: "
                f"useradd --system --user-group {account}), name another with --kernel-user, or run "
                "kernels as root with --allow-root-kernels"
            ) from None
        if entry.pw_uid == 0:
            raise IdentityError(
                f"the kernel account {account!r} is root: pass --allow-root-kernels to mean it"
            )
        return cls(account_of(entry.pw_uid, entry.pw_gid), switches=True)

    def for_kernel(self, run_as: RunAs | None) -> Account:
        """The account of one kernel: its owner's mapping (when this agent can switch), else the default."""
        if self.switches and run_as is not None and run_as.uid > 0:
            return account_of(run_as.uid, run_as.gid)
        return self.default

    def info(self) -> dict[str, Any]:
        """What `corral agent list` shows."""
        root = self.default.uid == 0
        return {
            "kernel_user": self.default.describe() + (" (allow_root_kernels is set)" if root else ""),
            "root_kernels": root,
            "maps_owners": self.switches,
        }


def give(path: Path, account: Account) -> None:
    """`path` (made by the agent) belongs to `account`, readable by it alone."""
    os.chown(path, account.uid, account.gid, follow_symlinks=False)
    path.chmod(0o700)


def unreachable_from(path: Path) -> Path | None:
    """The first ancestor of `path` that other accounts cannot traverse (None: all can)."""
    for p in [*reversed(path.resolve().parents), path.resolve()]:
        try:
            mode = p.stat().st_mode
        except OSError:
            return p
        if not mode & stat.S_IXOTH:
            return p
    return None


def cannot_enter(path: Path, account: Account) -> str | None:
    """Why `account` cannot make `path` its working directory (None: it can). Read from the mode
    bits as the kernel would meet them (its only group is its primary one; ACLs are not read): the
    agent may be root, who can enter anything."""
    if not path.is_absolute():
        return "not an absolute path"
    for p in [*reversed(path.parents), path]:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            return "no such directory"
        except OSError as exc:
            return exc.strerror.lower() if exc.strerror else str(exc)
        if not stat.S_ISDIR(st.st_mode):
            return "not a directory"
        if account.uid == 0:
            continue
        bit = (
            stat.S_IXUSR
            if st.st_uid == account.uid
            else stat.S_IXGRP
            if st.st_gid == account.gid
            else stat.S_IXOTH
        )
        if not st.st_mode & bit:
            return "permission denied"
    return None


def reachable(path: Path) -> bool:
    """Any account can get to `path` (it exists and every directory on the way is traversable)."""
    return path.exists() and unreachable_from(path) is None


def publish_worker_lib(source: Path, work_dir: Path) -> Path:
    """A copy of `corral_worker` every kernel account can import, in the agent's work dir."""
    lib = work_dir / "lib"
    lib.mkdir(exist_ok=True)
    lib.chmod(0o755)
    for module in source.glob("*.py"):
        target = lib / module.name
        tmp = lib / (module.name + ".tmp")
        tmp.write_bytes(module.read_bytes())
        tmp.chmod(0o644)
        tmp.replace(target)
    return lib


def ensure_account(name: str = DEFAULT_ACCOUNT) -> str:
    """Create the unprivileged system account kernels run as (when root and it is missing); a
    sentence saying what was done, for the start-up output."""
    if os.geteuid() != 0:
        return ""
    try:
        pwd.getpwnam(name)
        return ""
    except KeyError:
        pass
    done = subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 and done.returncode != 9:  # 9: created meanwhile by another `corral up`
        raise IdentityError(f"cannot create the kernel account {name!r}: {done.stderr.strip()}")
    return f"created the unprivileged account {name!r} that kernels run as"
