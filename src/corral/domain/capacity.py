"""The free capacity of a group's agents, kept sorted by free CPU and updated in place as sessions
are placed, so one placement looks at a few agents instead of sorting all of them.

It chooses exactly what `placement.place_gang` chooses over the same snapshot (tested against it):
concentrated takes the fitting agent with the least free CPU, dispersed the one with the most,
agent id breaking ties; a gang is placed kernel by kernel on what the earlier kernels left.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Collection, Iterable, Iterator, Sequence
from decimal import Decimal

from corral.domain.placement import AgentSnapshot, Placement, PlacementStrategy
from corral.domain.resources import CPU, ResourceSlots


class FreeCapacity:
    """Free slots per agent with two sorted views: (free cpu, id) and (-free cpu, id)."""

    def __init__(self, agents: Iterable[AgentSnapshot]) -> None:
        self._free = {a.agent_id: a.free for a in agents}
        self._fullest = sorted((f[CPU], aid) for aid, f in self._free.items())
        self._emptiest = sorted((-f[CPU], aid) for aid, f in self._free.items())

    def __len__(self) -> int:
        return len(self._free)

    def cpu_left(self) -> bool:
        """Some agent has CPU free: every kernel needs some, so without it nothing more fits."""
        return bool(self._emptiest) and self._emptiest[0][0] < 0

    def cpu_free(self) -> Decimal:
        """The free CPU of every agent, summed."""
        return -sum((c for c, _ in self._emptiest if c < 0), Decimal(0))

    def snapshot(self) -> list[AgentSnapshot]:
        """Every agent with what is free on it now, in id order."""
        return [AgentSnapshot(aid, self._free[aid]) for aid in sorted(self._free)]

    def place(
        self,
        kernels: Sequence[ResourceSlots],
        strategy: PlacementStrategy = PlacementStrategy.CONCENTRATED,
        excluded: Collection[str] = frozenset(),
    ) -> Placement | None:
        """Every kernel placed, or None; nothing is taken (see `take`)."""
        chosen: list[str] = []
        try:
            for need in kernels:
                pick = self._pick(need, strategy, excluded)
                if pick is None:
                    return None
                self._set(pick, self._free[pick] - need)  # the next kernel sees what this one left
                chosen.append(pick)
            return Placement(tuple(chosen))
        finally:
            for aid, need in zip(reversed(chosen), reversed(kernels[: len(chosen)]), strict=True):
                self._set(aid, self._free[aid] + need)

    def take(self, kernels: Sequence[ResourceSlots], placement: Placement) -> None:
        """Count a placement's kernels as used."""
        self.occupy(zip(placement.agent_ids, kernels, strict=True))

    def occupy(self, used: Iterable[tuple[str, ResourceSlots]]) -> None:
        """Count (agent, slots) as used; agents outside the index are ignored."""
        for aid, slots in used:
            if aid in self._free:
                self._set(aid, self._free[aid] - slots)

    def release(self, freed: Iterable[tuple[str, ResourceSlots]]) -> None:
        """Count (agent, slots) as free again; agents outside the index are ignored."""
        for aid, slots in freed:
            if aid in self._free:
                self._set(aid, self._free[aid] + slots)

    def _pick(
        self, need: ResourceSlots, strategy: PlacementStrategy, excluded: Collection[str]
    ) -> str | None:
        cpu = need[CPU]
        for aid in self._in_order(strategy, cpu):
            if aid not in excluded and need.fits_in(self._free[aid]):
                return aid
        return None

    def _in_order(self, strategy: PlacementStrategy, cpu: Decimal) -> Iterator[str]:
        """Agent ids in preference order, from the first that may have `cpu` cores free."""
        if strategy is PlacementStrategy.CONCENTRATED:
            start = bisect_left(self._fullest, (cpu, "")) if cpu > 0 else 0
            for i in range(start, len(self._fullest)):
                yield self._fullest[i][1]
            return
        for negative, aid in self._emptiest:
            if cpu > 0 and -negative < cpu:
                return  # every agent after this one has even less
            yield aid

    def _set(self, aid: str, free: ResourceSlots) -> None:
        old = self._free[aid][CPU]
        del self._fullest[bisect_left(self._fullest, (old, aid))]
        del self._emptiest[bisect_left(self._emptiest, (-old, aid))]
        self._free[aid] = free
        insort(self._fullest, (free[CPU], aid))
        insort(self._emptiest, (-free[CPU], aid))
