"""What the agent tells the manager about itself besides its capacity, and whether it can take kernels.

An agent whose parent cgroups were removed makes them again (here every HEALTH_TICK, and in the
supervisor when a start finds them gone).  When it cannot, no kernel can start here: the agent
reports itself unschedulable with the reason, placement skips it (its status stays ALIVE: it still
runs, reports and fences what it has), and once the cgroups can be made again it reports itself
schedulable again by itself.  The manager keeps both in the agent's `info` (store/agents.py), which
is what placement reads and what `corral agent list` shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from corral.agent.cgroup import CgroupMode, ensure_parents
from corral.agent.client import Fenced, ManagerUnreachable, ProtocolClient, Rejected
from corral.agent.identity import KernelIdentity
from corral.domain.rendezvous import parse_port_range
from corral.protocol.messages import HealthIn, ImageOffer
from corral.waits import wait_set

log = structlog.get_logger("corral.agent.health")

HEALTH_TICK = 1.0
"""Seconds between checks of the agent's cgroups (a stat of each parent when all is well)."""
REASON_MAX = 1024
"""Characters of a reason sent (the protocol's bound)."""


def describe(
    mode: CgroupMode,
    memory_why: str,
    cpu_why: str,
    identity: KernelIdentity | None,
    rendezvous_ports: str | None,
    pid: int,
) -> dict[str, Any]:
    """The registration's `info`: how limits are enforced and why, who kernels run as, the
    rendezvous ports the manager may pick here."""
    return {
        "memory_mode": mode.kind,
        "memory_mode_why": memory_why,
        "cpu_mode": mode.cpu,
        "cpu_mode_why": cpu_why,
        **(identity.info() if identity else {}),
        **_rendezvous_info(rendezvous_ports),
        "pid": pid,
    }


def _rendezvous_info(ports: str | None) -> dict[str, Any]:
    if not ports:
        return {}
    try:
        return {"rendezvous_ports": list(parse_port_range(ports))}
    except ValueError as exc:  # the CLI refuses it; an agent made otherwise declares none
        log.error("rendezvous ports ignored", error=str(exc))
        return {}


Offered = dict[str, dict[str, Any]]


class Health:
    """Whether kernels can start here (`reason` is None), the images offered here and whether
    each is ready (`offered()`), and what the manager was last told of both."""

    def __init__(self, mode: CgroupMode, offered: Callable[[], Offered] = dict) -> None:
        self.mode = mode
        self.reason: str | None = None
        """Why no kernel can start here; None when they can."""
        self.offered = offered
        self._told: tuple[int, str | None, Offered] = (-1, None, {})
        """(epoch, reason, images) the manager has recorded."""
        self._registering: tuple[str | None, Offered] = (None, {})
        self._wake = asyncio.Event()

    def check(self) -> None:
        """The cgroups looked at (made again where removed), and `reason` updated; said when it changes."""
        reason = ensure_parents(self.mode)
        if reason is not None:
            reason = reason[:REASON_MAX]
        if reason == self.reason:
            return
        if reason is not None:
            log.error("unschedulable: kernels cannot start here", reason=reason)
        else:
            log.info("schedulable again: the agent's cgroups are usable", was=self.reason)
        self.reason = reason

    def registering(self) -> str | None:
        """Why no kernel can start here (None: they can), as it stands now, for the registration
        (`registered` then records it as told)."""
        self.check()
        self._registering = (self.reason, self.offered())
        return self.reason

    @property
    def registering_images(self) -> Offered:
        """The images as `registering` saw them, for the same registration."""
        return self._registering[1]

    def registered(self, epoch: int) -> None:
        self._told = (epoch, *self._registering)

    def wake(self) -> None:
        """Check now (a kernel's start just failed): it may be the cgroups."""
        self._wake.set()

    async def run(self, client: ProtocolClient, agent_id: str, epoch: Callable[[], int]) -> None:
        """Until cancelled: check, and tell the manager of each change under the current epoch."""
        while True:
            self.check()
            now = (epoch(), self.reason, self.offered())
            if now != self._told:
                try:
                    body = HealthIn(
                        agent_id=agent_id,
                        epoch=now[0],
                        schedulable=now[1] is None,
                        unschedulable_reason=now[1],
                        images={k: ImageOffer(**v) for k, v in now[2].items()} or None,
                    )
                    await client.health(body)
                    self._told = now
                except Fenced:
                    pass  # another loop registers again, with how it stands then
                except (ManagerUnreachable, Rejected) as exc:
                    log.warning("could not tell the manager whether kernels can start here", error=str(exc))
            await wait_set(self._wake, HEALTH_TICK)
            self._wake.clear()
