"""Where a gang's kernels meet (rank 0's host and port), and whether its agents may start it
without waiting for a start order ("prepare and start", README: "Fewer round trips")."""

from __future__ import annotations

import zlib
from collections.abc import Collection, Sequence
from typing import Any

from corral.domain.status import KERNEL_HANDED, KERNEL_PROCESS, KernelStatus

PortRange = tuple[int, int]


def start_at_once(agent_ids: Sequence[str | None], master_port: int | None) -> bool:
    """A kernel is started as soon as it is prepared when its session's rendezvous is known as its
    order is computed: one kernel (it meets no one), a gang on one agent (that agent picks the port
    and gives it to every rank), or a gang whose rank-0 port is already set (chosen at placement
    from the agent's declared range, or reported by rank 0).  Otherwise every rank waits, prepared,
    for the start order that carries rank 0's port."""
    return len(agent_ids) == 1 or len(set(agent_ids)) == 1 or master_port is not None


def may_run(
    kernels: Sequence[tuple[KernelStatus, str | None]], master_port: int | None, alive: Collection[str]
) -> bool:
    """Whether a process of this session may exist (its kernels as (status, agent id), in rank
    order).  Yes when a kernel is started or told to start; and, when its orders said "prepare and
    start", when a kernel handed to an agent that is not alive has not reported: that agent may
    have started it just before it went silent, and only the fence says when it is dead."""
    if any(status in KERNEL_PROCESS for status, _ in kernels):
        return True
    if not start_at_once([agent for _, agent in kernels], master_port):
        return False
    return any(status in KERNEL_HANDED and agent not in alive for status, agent in kernels)


def port_range(info: Any) -> PortRange | None:
    """An agent's declared rendezvous ports (`info["rendezvous_ports"]`, [low, high]), or None when
    it declares none or something that is not a range of ports: an agent's bad declaration only
    costs its gangs the extra round trip."""
    if not isinstance(info, dict):
        return None
    value = info.get("rendezvous_ports")
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    low, high = value
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
        return None
    return (low, high) if 1 <= low <= high <= 65535 else None


def parse_port_range(text: str) -> PortRange:
    """`LOW-HIGH` as given on the command line; ValueError says what is wrong."""
    low, sep, high = text.partition("-")
    try:
        span = (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        raise ValueError(f"{text!r} is not a port range like 29400-29499") from None
    if not 1 <= span[0] <= span[1] <= 65535:
        raise ValueError(f"{text!r} is not a port range within 1-65535 (low first)")
    return span


def overlap(a: PortRange, b: PortRange) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def pick_port(ports: PortRange, held: Collection[int], key: str) -> int | None:
    """A port of `ports` that no live gang of the agent holds, or None when all are held.  The
    search starts at a place fixed by `key` (the session id), not at the lowest port: if something
    outside Corral holds a port, the retry (a new session id) most likely tries another one."""
    low, high = ports
    size = high - low + 1
    start = zlib.crc32(key.encode()) % size
    for step in range(size):
        port = low + (start + step) % size
        if port not in held:
            return port
    return None
