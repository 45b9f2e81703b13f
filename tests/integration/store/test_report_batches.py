"""A batch of reports is applied in rounds (every kernel's i-th report in round i, a round's steps
and endings a few statements each): whatever the kernels' statuses, generations and sessions, the
result is what applying each report on its own, in order, gives.

Twin kernels start alike; one of each pair gets its chain inside one interleaved batch, the other
the same reports one batch each.  Every column a report can touch, the allocation, the session's
start and the refused reports must agree, on either backend."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, example, given, settings
from sqlalchemy import select, update

from corral.domain.cause import TerminationReason
from corral.domain.records import KernelReport
from corral.domain.status import KernelStatus
from corral.store import kernels
from corral.store.db import transaction
from corral.store.tables import allocations
from corral.store.tables import kernels as kernel_table
from corral.store.tables import sessions as session_table
from tests.integration.store.test_reports import _placed
from tests.support.db import migrated

K = KernelStatus
REPORTABLE = sorted(kernels.AGENT_REPORTS)  # and SUSPENDED, which is refused outright
COMPARED = (
    "status",
    "started",
    "master_port",
    "exit_code",
    "signal",
    "oom_killed",
    "killed_by_corral",
    "image_failed",
    "agent_lost",
    "exited_at_ns",
    "termination_message",
    "error_record",
    "conditions",
    "detail",
    "logs_done",
)

PATH = [K.SCHEDULED, K.PREPARING, K.PULLING, K.PREPARED, K.CREATING, K.RUNNING]
ENDINGS = [K.TERMINATED, K.ERROR, K.CANCELLED]


def _report(status: st.SearchStrategy[K]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(
        status,
        st.integers(0, 5).map(lambda n: n == 0),  # about an earlier placement
        st.none() | st.integers(1024, 65535),  # a port
        st.none() | st.integers(-9, 255),  # an exit code, for an ending
        st.booleans(),  # its output shipped
    )


@st.composite
def _walk(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """An agent's steps along the startup path from somewhere, perhaps skipping one, perhaps ended."""
    first = draw(st.integers(1, len(PATH) - 1))
    last = draw(st.integers(first, len(PATH) - 1))
    statuses = [s for s in PATH[first : last + 1] if s is not K.PULLING or draw(st.booleans())]
    if statuses and draw(st.booleans()):
        statuses.pop(draw(st.integers(0, len(statuses) - 1)))
    statuses += draw(st.lists(st.sampled_from(ENDINGS), max_size=2))
    return [draw(_report(st.just(s))) for s in statuses] or [draw(_report(st.sampled_from(ENDINGS)))]


kernel_case = st.tuples(
    st.sampled_from(PATH) | st.sampled_from(list(K)),  # where the kernel is when the report lands
    st.booleans(),  # its session is being suspended
    _walk() | st.lists(_report(st.sampled_from([*REPORTABLE, K.SUSPENDED])), min_size=1, max_size=6),
)


def _reports(kernel_id: str, generation: int, chain: list[tuple[Any, ...]]) -> list[KernelReport]:
    return [
        KernelReport(
            kernel_id,
            status,
            generation=generation + (1 if stale else 0),
            exit_code=code if status in (K.TERMINATED, K.ERROR, K.CANCELLED) else None,
            master_port=port,
            detail={"seen": i},
            output_done=done,
        )
        for i, (status, stale, port, code, done) in enumerate(chain)
    ]


async def _state(engine: Any, kernel_id: str) -> tuple[Any, ...]:
    async with engine.connect() as conn:
        row = (await conn.execute(select(kernel_table).where(kernel_table.c.id == kernel_id))).one()
        freed = await conn.execute(
            select(allocations.c.released_at).where(allocations.c.kernel_id == kernel_id)
        )
        started = await conn.execute(
            select(session_table.c.started_at).where(session_table.c.id == row.session_id)
        )
        return (
            *(getattr(row, c) for c in COMPARED),
            freed.scalar_one() is not None,
            started.scalar_one() is not None,
        )


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(cases=st.lists(kernel_case, min_size=1, max_size=8))
# Suspending, but the steps stop where no kernel suspends from: they stand, its ending is refused.
# A port reported on the way and another with the end: the end's stands.  A process that ran and
# ended without an exit code: its session has started all the same.
@example(
    cases=[(K.CREATING, False, [(K.RUNNING, False, 2001, None, False), (K.TERMINATED, False, 2002, 0, True)])]
)
@example(
    cases=[(K.CREATING, False, [(K.RUNNING, False, None, None, False), (K.ERROR, False, None, None, False)])]
)
@example(
    cases=[
        (K.SCHEDULED, True, [(K.PREPARING, False, None, None, False), (K.CANCELLED, False, None, 0, True)])
    ]
)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_batch_ends_where_its_reports_one_by_one_do(
    fresh_database: Callable[[str], str], backend: str, cases: list[tuple[K, bool, list[tuple[Any, ...]]]]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        _, ids, k, _ = await _placed(engine, 2 * len(cases))
        one, each = k[: len(cases)], k[len(cases) :]
        async with transaction(engine) as conn:
            for i, (start, suspending, _) in enumerate(cases):
                pair = [one[i], each[i]]
                await conn.execute(
                    update(kernel_table).where(kernel_table.c.id.in_(pair)).values(status=str(start))
                )
                if suspending:
                    reason = str(TerminationReason.SUSPENDED)
                    await conn.execute(
                        update(session_table)
                        .where(session_table.c.id.in_([ids[i], ids[i + len(cases)]]))
                        .values(termination_reason=reason)
                    )
            generation = (
                await conn.execute(select(kernel_table.c.generation).where(kernel_table.c.id == one[0]))
            ).scalar_one()
        # Interleaved as an agent's batch would be: every kernel's reports in their own order.
        batch = [r for i, (_, _, chain) in enumerate(cases) for r in _reports(one[i], generation, chain)]
        batch = sorted(batch, key=lambda r: (r.detail["seen"], r.kernel_id))
        twin = dict(zip(one, each, strict=True))
        now = datetime.now(UTC)
        async with transaction(engine) as conn:
            refused_one, _ = await kernels.apply_reports(conn, "a", batch, now)
        refused_each: list[str] = []
        for r in batch:
            async with transaction(engine) as conn:
                refused, _ = await kernels.apply_reports(
                    conn, "a", [replace(r, kernel_id=twin[r.kernel_id])], now
                )
            refused_each += refused
        assert Counter(twin[i] for i in refused_one) == Counter(refused_each)
        for i in range(len(cases)):
            assert await _state(engine, one[i]) == await _state(engine, each[i]), cases[i]
