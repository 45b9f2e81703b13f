"""`sessions.stream_logs`, sync and async, on real agents: one kernel's output as it is written,
over once the session has ended; resumed from a piece's position; through a manager's restart
with nothing missed or repeated."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from corral.client import AsyncClient, Client, CorralError
from corral.client.models import LogOutput
from tests.support.cluster import TERMINAL, Cluster, poll, scratch


def _gated(gate: Path) -> list[str]:
    """Prints a line, waits for the test to open the gate, prints another."""
    return ["sh", "-c", f"echo first; while [ ! -e {gate}/go ]; do sleep 0.05; done; echo second"]


def _reader(corral: Client, session_id: str) -> tuple[list[LogOutput], threading.Thread]:
    got: list[LogOutput] = []

    def read() -> None:
        for piece in corral.sessions.stream_logs(session_id):
            got.append(piece)  # as it comes: the test polls this list

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return got, thread


def test_the_iterator_yields_output_live_and_stops_when_the_session_ends(
    corral: Client, cluster: Cluster
) -> None:
    gate = scratch(cluster.workdir / f"gate-{uuid.uuid4().hex[:6]}")
    s = corral.sessions.submit(command=_gated(gate), resources={"cpu": 0.5})
    got, reader = _reader(corral, s.id)
    poll(lambda: "".join(p.text for p in got) == "first\n", 60, "the first line")
    assert corral.sessions.get(s.id).status not in TERMINAL and reader.is_alive()
    (gate / "go").touch()
    reader.join(60)
    assert not reader.is_alive(), "the iterator did not stop with the session"
    assert "".join(p.text for p in got) == "first\nsecond\n"
    assert corral.sessions.get(s.id).ended
    assert {(p.rank, p.stream, p.generation) for p in got} == {(0, "stdout", 0)}
    rest = list(corral.sessions.stream_logs(s.id, after=got[0].position))
    assert rest == got[1:]  # from a piece's position: what followed it, once
    raw = list(corral.raw.sessions.stream_logs(s.id))
    assert [r["text"] for r in raw] == [p.text for p in got]


def test_refusals_raise_as_any_call(corral: Client) -> None:
    s = corral.sessions.submit(command=["true"], resources={"cpu": 0.5})
    with pytest.raises(CorralError) as missing:
        next(iter(corral.sessions.stream_logs("0000000000")))
    assert missing.value.status == 404
    with pytest.raises(CorralError) as rank:
        next(iter(corral.sessions.stream_logs(s.id, kernel=3)))
    assert (rank.value.status, rank.value.details["field"]) == (422, "kernel")


def test_the_async_iterator_streams_the_kernel_asked_for(cluster: Cluster) -> None:
    async def go() -> list[LogOutput]:
        async with AsyncClient(cluster.url, cluster.key) as corral:
            s = await corral.sessions.submit(
                command=["sh", "-c", "echo rank $CORRAL_CLUSTER_RANK"], cluster_size=2, resources={"cpu": 0.5}
            )
            async with asyncio.timeout(60):
                return [p async for p in corral.sessions.stream_logs(s.id, kernel=1)]

    got = asyncio.run(go())
    assert "".join(p.text for p in got) == "rank 1\n" and {p.rank for p in got} == {1}


def test_the_iterator_goes_on_through_a_manager_restart(own_cluster: Callable[..., Cluster]) -> None:
    # Liveness slow enough that the agent keeps its kernel through the restart (a slow start of
    # the manager must not fence it: the kernel would be killed before its second line).
    cluster = own_cluster(env={"CORRAL_AGENT_LEASE": "30", "CORRAL_FENCE_TIMEOUT": "60"})
    cluster.start_agent("agent-a", cpu=2)
    gate = scratch(cluster.workdir / "gate")
    with Client(cluster.url, cluster.key) as corral:
        s = corral.sessions.submit(command=_gated(gate))
        got, reader = _reader(corral, s.id)
        poll(lambda: "".join(p.text for p in got) == "first\n", 60, "the first line")
        cluster.kill_manager()
        cluster.start_manager()
        (gate / "go").touch()
        reader.join(90)
        assert not reader.is_alive(), "the iterator did not stop with the session"
        final = corral.sessions.get(s.id)
        assert "".join(p.text for p in got) == "first\nsecond\n", (final, cluster.output(s.id), got)
        assert final.ended
