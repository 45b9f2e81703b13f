"""GPU device indexes (DESIGN §6): a kernel gets whole devices of its agent, never one in use."""

from __future__ import annotations

from collections.abc import Collection


def assign_devices(count: int, taken: Collection[int], want: int) -> tuple[int, ...] | None:
    """The `want` lowest free device indexes of an agent with `count` devices, or None when fewer
    are free (capacity accounting makes that a bug, never a normal wait)."""
    free = [i for i in range(count) if i not in taken]
    return tuple(free[:want]) if len(free) >= want else None
