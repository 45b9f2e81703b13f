"""CPU time a bench run costs, by part: the machine's, and that of process trees the bench started
(the manager, the agents with everything they start, a PostgreSQL server running here).

On a machine a run keeps busy, throughput is the CPU it has divided by what a session costs: the
parts say where that cost is, and which part a change moved."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import psutil


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (every core, every process, the kernel)."""
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + t.irq + t.softirq)


def tree_seconds(pid: int) -> float | None:
    """CPU seconds of a process and every process under it: their own, and that of descendants
    already reaped (the OS adds a reaped child's time to its parent's); None if it is gone.  A
    descendant that ends between the listing and its reading, after its parent was read, is missed:
    a few milliseconds a run at most, never counted twice."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


@dataclass(frozen=True)
class Reading:
    """CPU seconds, as of one moment."""

    machine: float
    """The machine's busy seconds."""
    parts: Mapping[str, float]
    """Each part's seconds (the sum over its process trees)."""


class Meter:
    """Reads the machine and named groups of process trees; `since` gives the difference."""

    def __init__(self, parts: Mapping[str, Iterable[int]]) -> None:
        self._parts = {name: tuple(pids) for name, pids in parts.items()}

    def read(self) -> Reading:
        """Now; a part one of whose processes has gone is left out (its reading would be short)."""
        parts = {}
        for name, pids in self._parts.items():
            seconds = [tree_seconds(pid) for pid in pids]
            if None not in seconds:
                parts[name] = sum(s for s in seconds if s is not None)
        return Reading(busy_seconds(), parts)

    def since(self, start: Reading) -> Reading:
        """What was used from `start` to now, for the parts read at both."""
        now = self.read()
        return Reading(
            now.machine - start.machine,
            {name: now.parts[name] - start.parts[name] for name in now.parts if name in start.parts},
        )


def per_session(used: Reading, n: int) -> str:
    """The line a bench prints: milliseconds of CPU per session, the machine's then each part's."""
    parts = ", ".join(f"{name} {1000 * s / n:.2f}" for name, s in used.parts.items())
    return f"cpu per session: {1000 * used.machine / n:.2f} ms on the machine ({parts})"
