"""One kernel's output as a live stream: what is stored after a position, then what arrives, until
no more can (services/logs.kernel_closed).

A position is bytes, not rows: the bytes of each of the kernel's streams read so far, in its
current placement (a resumed kernel writes new files, from offset 0 again).  Rows of one stream
are stored in offset order and ids commit in order (ship_logs), so "every row past the position,
in id order" is exactly what a reader at it has not read: a reconnect misses and repeats nothing,
and any byte offset, even one inside a row, is a place to resume from."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from corral.domain.records import KernelRecord, Principal, SessionRecord
from corral.domain.status import TERMINAL_SESSION
from corral.protocol.types import INT64_MAX
from corral.services import sessions as session_service
from corral.services.errors import InvalidInput
from corral.services.logs import kernel_closed
from corral.store import agents, logs, sessions
from corral.store.db import reading
from corral.store.unit import Engine

STREAMS = ("stdout", "stderr", "prepare")
"""A kernel's streams, in the order of a position's offsets."""
POLL = 0.2
"""Seconds between reads of the store while nothing new is there: no signal tells of a shipment
(another manager may have stored it), so a line reaches a reader at most this much later."""
PAGE_BYTES = 1 << 20
"""Bytes read at once: what one stream holds in memory (and one row more at most)."""
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Position:
    """Where a reader is in one kernel's output; as text `G-O-E-P`: the placement (generation) and
    the bytes of stdout, stderr and prepare read in it.  Left-out parts are 0: `0-120` is after 120
    bytes of generation 0's stdout."""

    generation: int = 0
    offsets: tuple[int, int, int] = (0, 0, 0)

    def __str__(self) -> str:
        return "-".join(str(n) for n in (self.generation, *self.offsets))

    def read(self) -> dict[str, int]:
        return dict(zip(STREAMS, self.offsets, strict=True))

    def past(self, generation: int, stream: str, end: int) -> Position:
        """The position once `stream` of `generation` is read to `end` (a later placement: from 0)."""
        read = self.read() if generation == self.generation else dict.fromkeys(STREAMS, 0)
        read[stream] = end
        return Position(generation, (read["stdout"], read["stderr"], read["prepare"]))

    @classmethod
    def parse(cls, text: str | None, field: str) -> Position:
        """`text` as a position (None: the beginning); a 422 naming `field` when it is not one."""
        if text is None:
            return cls()
        parts = text.split("-")
        if not 1 <= len(parts) <= 4 or not all(p.isascii() and p.isdigit() and len(p) <= 19 for p in parts):
            raise InvalidInput(field, f"not a log position {text[:60]!r}: GENERATION-STDOUT-STDERR-PREPARE")
        numbers = [int(p) for p in parts] + [0] * (4 - len(parts))
        if numbers[0] > INT32_MAX or max(numbers[1:]) > INT64_MAX:
            raise InvalidInput(field, f"log position {text[:60]!r} out of range")
        return cls(numbers[0], (numbers[1], numbers[2], numbers[3]))


@dataclass(frozen=True)
class Output:
    """A piece of output; `position`: the reader's once it has read it."""

    position: Position
    generation: int
    stream: str
    offset: int
    data: bytes


@dataclass(frozen=True)
class End:
    """No more output can come: the session has ended and all of the kernel's has been sent."""

    position: Position
    status: str
    dropped: int


async def kernel_of(engine: Engine, who: Principal, session_id: str, rank: int) -> SessionRecord:
    """The session, if the caller may see it (a 404 otherwise) and it has a kernel of this rank
    (a 422 naming `kernel` otherwise): checked before a stream sends its first byte."""
    session = await session_service.get(engine, who, session_id)
    if _kernel(session, rank) is None:
        ranks = f"0 to {len(session.kernels) - 1}" if len(session.kernels) > 1 else "0"
        raise InvalidInput("kernel", f"no kernel of rank {rank}: the session's ranks are {ranks}")
    return session


def _kernel(session: SessionRecord, rank: int) -> KernelRecord | None:
    return next((k for k in session.kernels if k.rank == rank), None)


async def stream(
    engine: Engine, session_id: str, rank: int, start: Position, stopped: Callable[[], bool]
) -> AsyncIterator[Output | End]:
    """The kernel's output after `start`, then as it is stored, in order, ending with `End` once
    no more can come; or without it when `stopped()` (the manager shuts down: a client resumes).
    A cursor inside a row gets that row's rest."""
    at = start
    while True:
        async with reading(engine) as conn:
            # The session first: if its output is closed now, every row was stored before.
            session = await sessions.get(conn, session_id)
            kernel = _kernel(session, rank) if session is not None else None
            if session is None or kernel is None:
                return  # not deleted while a session lives; a stream of nothing ends
            alive = await agents.alive_ids(conn) if session.status in TERMINAL_SESSION else set()
            ended = kernel_closed(session, kernel, alive)
            rows = await logs.read_kernel(conn, kernel.id, at.generation, at.read(), PAGE_BYTES)
        for row in rows:
            data, offset = row.data, row.offset
            if row.generation == at.generation:
                cut = at.read()[row.stream] - offset
                data, offset = (data[cut:], offset + cut) if cut > 0 else (data, offset)
            at = at.past(row.generation, row.stream, offset + len(data))
            yield Output(at, row.generation, row.stream, offset, data)
        if rows:
            continue
        if ended:
            yield End(at, str(session.status), kernel.log_dropped)
            return
        if stopped():
            return
        await asyncio.sleep(POLL)
