"""One scheduling cycle at scale: N pending sessions and M agents registered through the real store
(agents as rows with fresh heartbeats, no processes), then the manager's own cycle (sweep and every
handler, as `corral serve` runs it) timed C times; p50/p95 and the manager process's peak RSS.

    .venv/bin/python bench/cycle.py [--pending 100000] [--agents 5000] [--cycles 10] [--postgres]

The store is filled by a separate process, so the RSS printed is the cycle's alone.  Each cycle
places the head of the queue (its window), so later cycles see the earlier ones' SCHEDULED and
PREPARING sessions too, as a real manager would.  With --full every agent already runs a priority-1
session that fills it: nothing fits, so each cycle reads the queue, tries the whole window over
every agent, holds agents for the head, and chooses victims among 5k running sessions for the
first priority-20 session (placement's and preemption's costliest case).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy.ext.asyncio import AsyncEngine

from bench.common import add_database_options, database, machine, pct, scratch
from corral.domain.records import NewSession
from corral.domain.resources import ResourceSlots
from corral.domain.spec import SessionSpec
from corral.manager.loop import SchedulerLoop
from corral.settings import SchedulerSettings
from corral.store import agents, sessions
from corral.store.db import transaction, upgrade
from corral.store.dialect.engine import make_engine
from corral.wakeup import Wakeup

BATCH = 2000


async def fill(url: str, pending: int, n_agents: int, full: bool) -> None:
    engine = make_engine(url)
    try:
        await upgrade(engine)
        now = datetime.now(UTC)
        async with transaction(engine) as conn:
            await agents.ensure_resource_group(conn, "default", now)
            for i in range(n_agents):
                await agents.register(
                    conn,
                    f"agent-{i:05d}",
                    hostname=f"node{i:05d}",
                    address=f"http://10.0.{i // 250}.{i % 250}:6011",
                    resource_group="default",
                    capacity=ResourceSlots.parse({"cpu": 32, "mem": "64G"}),
                    info={},
                    now=now,
                )
        if full:
            # Every agent busy with one 32-CPU session (SCHEDULED with its allocation, as placed).
            await _occupy(engine, n_agents)
        rng = random.Random(7)
        for start in range(0, pending, BATCH):
            batch = []
            for _ in range(min(BATCH, pending - start)):
                sid = str(uuid.uuid4())
                spec = SessionSpec(
                    command=("true",),
                    resources=ResourceSlots.parse({"cpu": rng.choice((1, 1, 1, 2, 4)), "mem": "1G"}),
                    priority=rng.choice((1, 5, 10, 10, 10, 20)),
                )
                batch.append(NewSession(id=sid, name=f"s-{sid[:8]}", owner="bench", spec=spec))
            async with transaction(engine) as conn:
                await sessions.insert_sessions(conn, batch, datetime.now(UTC))
            print(f"\r  filled {start + len(batch)}/{pending}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    finally:
        await engine.dispose()


async def _occupy(engine: AsyncEngine, n_agents: int) -> None:
    """Every agent runs one 32-CPU priority-1 session, started an hour ago: preemptible by the
    priority-20 part of the queue (the group's default preemptible_priority is 5)."""
    from sqlalchemy import update

    from corral.domain.placement import Placement
    from corral.domain.records import Move
    from corral.domain.status import KernelStatus, SessionStatus
    from corral.store import kernels
    from corral.store.tables import kernels as kernel_rows
    from corral.store.tables import sessions as session_rows

    big = SessionSpec(
        command=("sleep", "inf"), resources=ResourceSlots.parse({"cpu": 32, "mem": "64G"}), priority=1
    )
    for start in range(0, n_agents, BATCH):
        now = datetime.now(UTC)
        ids = list(range(start, min(n_agents, start + BATCH)))
        new = [NewSession(id=str(uuid.uuid4()), name=f"big-{i}", owner="bench", spec=big) for i in ids]
        async with transaction(engine) as conn:
            await sessions.insert_sessions(conn, new, now)
            moves = [
                Move(n.id, SessionStatus.PENDING, SessionStatus.SCHEDULED, KernelStatus.SCHEDULED)
                for n in new
            ]
            await sessions.apply_moves(conn, moves, now)
            placed = {n.id: Placement((f"agent-{i:05d}",)) for n, i in zip(new, ids, strict=True)}
            await kernels.write_placements(conn, placed, now)
            # Straight to RUNNING (a bench fixture: no agent process is there to report the steps).
            started = now - timedelta(hours=1)
            mine = [n.id for n in new]
            await conn.execute(
                update(session_rows)
                .where(session_rows.c.id.in_(mine))
                .values(status=str(SessionStatus.RUNNING), started_at=started, status_changed_at=started)
            )
            await conn.execute(
                update(kernel_rows)
                .where(kernel_rows.c.session_id.in_(mine))
                .values(status=str(KernelStatus.RUNNING), started=True, status_changed_at=started)
            )


async def measure(url: str, cycles: int) -> list[float]:
    engine = make_engine(url)
    loop = SchedulerLoop(engine, "default", SchedulerSettings(), Wakeup(), holder=uuid.uuid4().hex[:16])
    took: list[float] = []
    try:
        for i in range(cycles):
            async with transaction(engine) as conn:
                await agents.refresh_all_leases(conn, datetime.now(UTC))  # agents alive, as heartbeating
            t0 = time.perf_counter()
            moved = await loop.run_once()
            took.append(time.perf_counter() - t0)
            print(f"  cycle {i + 1}: {took[-1] * 1000:.0f} ms, {moved} moved", file=sys.stderr)
    finally:
        await engine.dispose()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=5_000)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--full", action="store_true", help="every agent already full (nothing fits)")
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile of the cycles")
    parser.add_argument("--fill-only", default="", help=argparse.SUPPRESS)  # the filling child
    add_database_options(parser)
    args = parser.parse_args()
    if args.fill_only:
        asyncio.run(fill(args.fill_only, args.pending, args.agents, args.full))
        return
    with ExitStack() as stack:
        url = stack.enter_context(database(args, scratch("corral-bench-cycle-", stack)))
        t0 = time.monotonic()
        child = [sys.executable, __file__, "--fill-only", url, "--pending", str(args.pending)]
        child += ["--agents", str(args.agents)] + (["--full"] if args.full else [])
        subprocess.run(child, check=True)
        print(f"  store filled in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        if args.profile:
            import cProfile
            import pstats

            with cProfile.Profile() as prof:
                took = asyncio.run(measure(url, args.cycles))
            pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
        else:
            took = asyncio.run(measure(url, args.cycles))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        print(machine(url))
        print(
            f"cycle over {args.pending} pending x {args.agents} agents{' (all full)' if args.full else ''}:"
            f" p50 {pct(took, 0.5) * 1000:.0f} ms  p95 {pct(took, 0.95) * 1000:.0f} ms"
            f"  (n={len(took)})  manager peak RSS {rss:.0f} MiB"
        )


if __name__ == "__main__":
    main()
