"""The supervisor's kept kernel cgroups: an emptied one is handed to the next kernel to start, its
limits changed, instead of being removed and made again."""

from __future__ import annotations

import os

from corral.agent.cgroup import CgroupMode, KernelCgroup

KEEP_CGROUPS = 64
"""Emptied kernel cgroups kept at most, for the next kernels to start in (take)."""
LOOK_AT = 4
"""Kept cgroups a start looks at, the last kept first (each costs a read of its charge)."""
SHARE_OF_LIMIT = 16
"""A kept cgroup is given to a kernel with a memory limit only if what is still charged to it is at
most this fraction of the limit (1/16)."""


class CgroupPool:
    def __init__(self, mode: CgroupMode) -> None:
        self.mode = mode
        self._idle: list[KernelCgroup] = []
        """Emptied kernel cgroups kept for the next kernels (take)."""
        self._keeps = os.geteuid() == 0

    def take(self, key: str, mem: int | None, cpus: float | None) -> KernelCgroup | None:
        """A kernel's cgroups with its limits: an emptied one kept from an earlier kernel, else new.
        Making and removing them costs as much as the rest of a short kernel's start (cgroup v1: a
        memory, a cpu and a cpuacct directory, each made and torn down by the OS)."""
        for kept in self._idle[-LOOK_AT:][::-1]:
            self._idle.remove(kept)
            try:
                kept.check()  # removed behind our back (its join would fail): forgotten, not handed out
                # What is still charged to it counts against this kernel's limit: a sixteenth at most.
                if not mem or kept.charge() * SHARE_OF_LIMIT <= mem:
                    kept.limit(mem, cpus)
                    return kept
                if len(self._idle) + 1 < KEEP_CGROUPS:
                    self._idle.insert(0, kept)  # for a kernel with a larger limit, or none
                    continue
            except (OSError, ValueError):
                pass
            kept.remove()  # unusable, or making room for the new one
        cgroup = KernelCgroup.of(self.mode, key)
        if cgroup is not None:
            try:
                cgroup.create(mem, cpus)
            except BaseException:
                cgroup.remove()
                raise
        return cgroup

    def give_back(self, cgroup: KernelCgroup, empty: bool = False) -> None:
        """Kept for the next kernel when nothing runs in it and little is charged to it.  Only by a
        root supervisor: its cgroups' files are root's, out of the kernels' reach (unprivileged,
        the agent's delegated tree is its kernels' account's too, who could raise a limit there
        that the next kernel would inherit)."""
        if self._keeps and len(self._idle) < KEEP_CGROUPS and cgroup.reusable(empty):
            self._idle.append(cgroup)
        else:
            cgroup.remove()

    def clear(self) -> None:
        """The supervisor is going: every kept cgroup is removed (so the agent can remove its own)."""
        for cgroup in self._idle:
            cgroup.remove()
        self._idle.clear()
