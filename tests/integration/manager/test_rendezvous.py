"""Prepare and start for gangs whose rendezvous is known when their orders are handed over: on one
agent (it picks rank 0's port), or spread over agents whose rank-0 agent declares rendezvous ports
(the manager chooses one at placement, never one a live gang of that agent holds).  Other gangs
still wait, prepared, for the start order that carries rank 0's port."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from corral.domain.judge import PhaseLimits
from corral.domain.placement import Placement
from corral.domain.records import KernelReport, Move, NewSession
from corral.domain.spec import SessionSpec
from corral.domain.status import KernelStatus, SessionStatus
from corral.manager.coordinator import Coordinator
from corral.manager.handlers.prepare import PrepareSessions
from corral.services.agent_protocol import AgentProtocol
from corral.settings import SchedulerSettings
from corral.store import journal, kernels, sessions
from corral.store.db import transaction
from corral.store.tables import agents as agent_rows
from corral.store.tables import allocations
from corral.wakeup import Wakeup
from tests.conftest import BACKENDS
from tests.support.cluster import Cluster
from tests.support.db import migrated, register_agent

RANGE = [29400, 29401]


async def _handed_over(engine: AsyncEngine, placement: tuple[str, ...]) -> str:
    """A gang placed as given (rank i on placement[i]) and handed to its agents (PREPARING)."""
    sid = str(uuid.uuid4())
    now = datetime.now(UTC)
    spec = SessionSpec(command=("true",), cluster_size=len(placement))
    async with transaction(engine) as conn:
        await sessions.insert_sessions(conn, [NewSession(id=sid, name=sid[:8], owner="t", spec=spec)], now)
        await kernels.write_placements(conn, {sid: Placement(placement)}, now)
        steps = (
            (SessionStatus.PENDING, SessionStatus.SCHEDULED),
            (SessionStatus.SCHEDULED, SessionStatus.PREPARING),
        )
        for src, dst in steps:
            assert await sessions.apply_moves(conn, [Move(sid, src, dst, KernelStatus(dst.value))], now)
    return sid


async def _orders(protocol: AgentProtocol, epochs: dict[str, int], sid: str) -> list[dict[str, Any]]:
    """The orders of session `sid`, from every agent, in rank order."""
    found = []
    for agent_id, epoch in epochs.items():
        _, orders, _ = await protocol.orders(agent_id, epoch, "", 0)
        found += [o.model_dump(mode="json") for o in orders if o.session_id == sid]
    return sorted(found, key=lambda o: o["rank"])


@pytest.mark.parametrize("backend", BACKENDS)
async def test_gangs_start_at_once_exactly_when_their_rendezvous_is_known(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    async with migrated(fresh_database(backend)) as engine:
        declared: dict[str, Any] = {
            "a": {"rendezvous_ports": RANGE},
            "b": {},
            "c": {"rendezvous_ports": [0, 70000]},
            "d": {"rendezvous_ports": RANGE},  # on a's host: the ports are the host's, not the agent's
        }
        hosts = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3", "d": "10.0.0.1"}
        epochs = {}
        async with transaction(engine) as conn:
            for agent_id, info in declared.items():
                epochs[agent_id] = await register_agent(
                    conn, agent_id, {"cpu": 64}, address=hosts[agent_id], info=info
                )
        protocol = AgentProtocol(engine, SchedulerSettings(), Wakeup(), log_cap=1 << 20)

        async def orders(placement: tuple[str, ...]) -> list[dict[str, Any]]:
            return await _orders(protocol, epochs, await _handed_over(engine, placement))

        # Spread, rank 0 on an agent with ports: chosen at placement, every rank starts at once.
        first = await orders(("a", "b"))
        port = first[0]["spec"]["master_port"]
        assert port in RANGE
        assert [(o["spec"]["start_at_once"], o["spec"]["master_port"]) for o in first] == [(True, port)] * 2
        assert not first[0]["spec"]["pick_master_port"]
        assert first[1]["spec"]["master_addr"] == "10.0.0.1"
        # A second live gang with rank 0 on "a" gets the other port; a third finds both held.
        second = await orders(("a", "c"))
        assert {o["spec"]["master_port"] for o in second} == set(RANGE) - {port}
        third = await orders(("a", "b"))
        assert [(o["spec"]["start_at_once"], o["spec"]["master_port"]) for o in third] == [(False, None)] * 2
        assert third[0]["spec"]["pick_master_port"]
        # Another agent on the same host finds the host's ports held too.
        assert [o["spec"]["master_port"] for o in await orders(("d", "b"))] == [None, None]
        # Rank 0 on an agent without ports (or with a range that is not one): the start order.
        for placement in (("b", "a"), ("c", "a")):
            assert [o["spec"]["start_at_once"] for o in await orders(placement)] == [False, False]
        # On one agent: that agent picks the port (rank 0) and starts every rank at once.
        local = await orders(("b", "b", "b"))
        assert [o["spec"]["start_at_once"] for o in local] == [True] * 3
        assert [o["spec"]["pick_master_port"] for o in local] == [True, False, False]
        # The first gang ends: its port is free for the next gang on "a".
        async with engine.connect() as conn:
            gone = [o["kernel_id"] for o in first]
            await kernels.release(conn, gone, datetime.now(UTC))
            await conn.commit()
        again = await orders(("a", "b"))
        assert again[0]["spec"]["master_port"] == port


MEET = r"""
import os, socket, sys, time
port, addr, rank = int(os.environ["MASTER_PORT"]), os.environ["MASTER_ADDR"], os.environ["RANK"]
if rank == "0":
    server = socket.create_server(("", port))
    conn, _ = server.accept()
    print("rank 0 met", conn.recv(64).decode(), "on", port)
else:
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("rank %s: no one listens on %s:%s" % (rank, addr, port))
            time.sleep(0.05)
    conn.sendall(("rank " + rank).encode())
    print("rank", rank, "met rank 0 on", port)
"""


def _met(
    c: Cluster, sid: str, start: str = "started by its agents as soon as prepared"
) -> tuple[dict[str, Any], int]:
    """The session, once both ranks met; and the port they met on."""
    s = c.wait(sid, timeout=60)
    assert (s["status"], s["result"]) == ("TERMINATED", "success"), json.dumps(s, indent=1)[:3000]
    out = c.output(sid)
    assert "rank 0 met rank 1" in out and "rank 1 met rank 0" in out, out
    ports = {int(line.split()[-1]) for line in out.splitlines() if " met " in line}
    assert len(ports) == 1, out
    # No start order was needed, and the audit says so; every status is still recorded in order.
    history = c.history(sid)
    assert [h["message"] for h in history if h["handler"] == "StartSessions"] == [start]
    moves = [h["to_status"] for h in history if h["to_status"]]
    assert moves == ["SCHEDULED", "PREPARING", "PREPARED", "CREATING", "RUNNING", "TERMINATING", "TERMINATED"]
    return s, ports.pop()


def test_a_gang_on_one_agent_meets_on_the_port_its_agent_picked(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster()
    c.start_agent("solo", cpu=2)
    s, port = _met(c, c.submit(command=["python3", "-c", MEET], cluster_size=2, resources={"cpu": 1})["id"])
    assert {k["agent"] for k in s["kernels"]} == {"solo"}
    assert s["kernels"][0]["master_port"] == port


def test_a_spread_gang_meets_on_a_port_chosen_at_placement(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster()
    # A range of this test's own: the suite's workers run tests at once (PYTEST_XDIST_WORKER gwN).
    low = 29460 + 10 * int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    for agent_id in ("left", "right"):
        c.start_agent(agent_id, cpu=1, CORRAL_AGENT_RENDEZVOUS_PORTS=f"{low}-{low + 9}")
    s, port = _met(c, c.submit(command=["python3", "-c", MEET], cluster_size=2, resources={"cpu": 1})["id"])
    assert {k["agent"] for k in s["kernels"]} == {"left", "right"}
    assert low <= port <= low + 9 and s["kernels"][0]["master_port"] == port


def test_a_spread_gang_without_declared_ports_waits_for_the_start_order(
    own_cluster: Callable[..., Cluster],
) -> None:
    c = own_cluster()
    for agent_id in ("left", "right"):
        c.start_agent(agent_id, cpu=1)
    sid = c.submit(command=["python3", "-c", MEET], cluster_size=2, resources={"cpu": 1})["id"]
    s, port = _met(c, sid, start="start orders handed to agents")
    assert {k["agent"] for k in s["kernels"]} == {"left", "right"}
    assert s["kernels"][0]["master_port"] == port  # picked by rank 0's agent, then handed to rank 1


@pytest.mark.parametrize("ports", ["29499-29400", "abc", "0-10", "1-70000"])
def test_an_agent_refuses_a_bad_rendezvous_range(tmp_path: Any, ports: str) -> None:
    c = Cluster("sqlite+aiosqlite:///" + str(tmp_path / "unused.db"), tmp_path)
    try:
        done = c.corral("agent", "--token", "t", "--rendezvous-ports", ports, timeout=60)
        assert done.returncode != 0
        assert "--rendezvous-ports" in done.stderr and ports in done.stderr
        assert "Traceback" not in done.stderr
    finally:
        c.close()


def test_an_agent_refuses_rendezvous_ports_among_the_ephemeral_ones(tmp_path: Any) -> None:
    low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    c = Cluster("sqlite+aiosqlite:///" + str(tmp_path / "unused.db"), tmp_path)
    try:
        done = c.corral("agent", "--token", "t", "--rendezvous-ports", f"{low}-{low + 10}", timeout=60)
        assert done.returncode != 0 and "ephemeral" in done.stderr and f"{low}-{high}" in done.stderr
    finally:
        c.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_gang_with_a_running_rank_is_stopped_not_requeued(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """Rank 0 started at once and runs; rank 1's agent is lost before preparing it.  Sending the
    gang back to the queue would free rank 0's capacity while it still runs and place it again
    beside itself: the session is stopped instead, rank 0 keeps its placement until it is gone."""
    async with migrated(fresh_database(backend)) as engine:
        epochs = {}
        async with transaction(engine) as conn:
            for agent_id, info in (("a", {"rendezvous_ports": RANGE}), ("b", {})):
                address = "10.0.0.1" if agent_id == "a" else "10.0.0.2"
                epochs[agent_id] = await register_agent(
                    conn, agent_id, {"cpu": 64}, address=address, info=info
                )
        protocol = AgentProtocol(engine, SchedulerSettings(), Wakeup(), log_cap=1 << 20)
        sid = await _handed_over(engine, ("a", "b"))
        rank0, _ = await _orders(protocol, epochs, sid)
        steps = [KernelStatus.PREPARED, KernelStatus.CREATING, KernelStatus.RUNNING]
        reports = [KernelReport(rank0["kernel_id"], status, generation=0) for status in steps]
        assert (await protocol.report("a", epochs["a"], reports))[:2] == (3, [])

        # The database itself refuses to re-queue it.
        async with transaction(engine) as conn:
            back = Move(sid, SessionStatus.PREPARING, SessionStatus.PENDING, KernelStatus.PENDING)
            assert await sessions.apply_moves(conn, [back], datetime.now(UTC)) == []
        # And the coordinator, finding rank 1's agent lost, stops it instead of re-queueing it.
        async with transaction(engine) as conn:
            await conn.execute(update(agent_rows).where(agent_rows.c.id == "b").values(status="LOST"))
        limits = PhaseLimits(timeouts={}, max_tries=1)
        coordinator = Coordinator(engine, "default", [], limits, lambda: datetime.now(UTC))
        assert await coordinator.run_handler(PrepareSessions()) == 0
        async with engine.connect() as conn:
            s = await sessions.get(conn, sid)
            held = await conn.execute(
                select(allocations.c.kernel_id).where(
                    allocations.c.session_id == sid, allocations.c.released_at.is_(None)
                )
            )
            still_held = set(held.scalars())
        assert s is not None
        assert (s.status, s.termination_reason) == (SessionStatus.PREPARING, "scheduler_timeout")
        assert "already run" in (s.termination_message or "")
        first = s.kernels[0]
        assert (first.status, first.agent_id, first.generation) == (KernelStatus.RUNNING, "a", 0)
        assert rank0["kernel_id"] in still_held
        async with engine.connect() as conn:
            rows = await journal.history_of(conn, sid)
        assert [r.handler for r in rows if "already run" in r.message] == ["PrepareSessions"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_order_carries_its_spec_until_the_agent_says_it_started_that_generation(
    backend: str, fresh_database: Callable[[str], str]
) -> None:
    """The spec is read (and sent) for a kernel the agent has not started; for one it has, the
    order still says the kernel's status, generation and kill, without the spec it never reads."""
    async with migrated(fresh_database(backend)) as engine:
        async with transaction(engine) as conn:
            epoch = await register_agent(conn, "a", {"cpu": 8}, address="10.0.0.1")
        protocol = AgentProtocol(engine, SchedulerSettings(), Wakeup(), log_cap=1 << 20)
        started, waiting = await _handed_over(engine, ("a",)), await _handed_over(engine, ("a",))

        async def orders(said: frozenset[str]) -> dict[str, dict[str, Any]]:
            _, found, _ = await protocol.orders("a", epoch, "", 0, said)
            return {o.session_id: o.model_dump(mode="json") for o in found}

        before = await orders(frozenset())
        assert before[started]["spec"]["command"] == ["true"] and before[waiting]["spec"]["command"] == [
            "true"
        ]
        key = f"{before[started]['kernel_id']}.{before[started]['generation']}"
        after = await orders(frozenset({key}))
        assert after[started]["spec"] is None
        assert {k: v for k, v in after[started].items() if k != "spec"} == {
            k: v for k, v in before[started].items() if k != "spec"
        }
        assert after[waiting] == before[waiting]
        # Another generation of the kernel (placed again) is not the one started: its spec is sent.
        other = f"{before[started]['kernel_id']}.{before[started]['generation'] + 1}"
        assert (await orders(frozenset({other})))[started]["spec"]["command"] == ["true"]
