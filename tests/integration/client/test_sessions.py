"""Sessions through the client, on real agents: a gang's root cause, a retry chain, logs, cancel."""

from __future__ import annotations

import asyncio

import pytest

from corral.client import AsyncClient, Client, CorralError
from tests.support.cluster import Cluster

GANG = """
import os, time
from corral_worker import record
if os.environ["RANK"] == "1":
    with record():
        raise ValueError("bad batch at step 2")
time.sleep(60)
"""


def test_a_failed_gang_names_its_root_cause(corral: Client) -> None:
    s = corral.sessions.submit(command=["python3", "-c", GANG], cluster_size=2, resources={"cpu": 0.5})
    done = corral.wait(s.id, timeout=90)
    assert (done.status, done.result) == ("ERROR", "failure"), done
    assert done.root_cause is not None and done.root_cause.rank == 1
    assert (
        done.root_cause.line().startswith("worker ")
        and "ValueError: bad batch at step 2" in done.root_cause.line()
    )
    errors = corral.sessions.errors(s.id)
    assert errors[0].root_cause and errors[0].rank == 1 and errors[0].type == "ValueError"
    assert {k.rank for k in corral.sessions.kernels(s.id)} == {0, 1}


def test_a_retried_session_is_followed_to_its_last_attempt(corral: Client) -> None:
    flaky = '[ "$CORRAL_ATTEMPT" -ge 2 ] || exit 75; echo "attempt $CORRAL_ATTEMPT"'
    s = corral.sessions.submit(
        command=["sh", "-c", flaky], retry_policy={"max_retries": 2, "retry_delay": 0}, resources={"cpu": 0.5}
    )
    last = corral.wait_chain(s.id, timeout=90)
    assert (last.attempt, last.succeeded, last.parent_session_id) == (2, True, s.id), last
    assert [a.attempt for a in corral.sessions.attempts(s.id)] == [1, 2]
    assert "".join(c.data for c in corral.follow(last.id)) == "attempt 2\n"
    assert [h.to_status for h in corral.sessions.history(last.id)][-1] == "TERMINATED"
    again = corral.sessions.retry(last.id, force=True)
    assert again.attempt == 3 and again.manual_retry


def test_cancel_and_what_a_missing_session_raises(corral: Client) -> None:
    s = corral.sessions.submit(command=["sleep", "60"], resources={"cpu": 0.5})
    corral.sessions.cancel(s.id)
    assert corral.wait(s.id, timeout=60).status in ("CANCELLED", "TERMINATED")
    with pytest.raises(CorralError) as caught:
        corral.sessions.get("0000000000")
    assert caught.value.status == 404


def test_the_async_client_awaits_the_same_session(cluster: Cluster) -> None:
    async def go() -> tuple[str, str]:
        async with AsyncClient(cluster.url, cluster.key) as corral:
            s = await corral.sessions.submit(command=["echo", "from asyncio"], resources={"cpu": 0.5})
            async with asyncio.timeout(60):
                done = await corral.wait(s.id)
            out = "".join([c.data async for c in corral.follow(s.id)])
            return done.status, out

    assert asyncio.run(go()) == ("TERMINATED", "from asyncio\n")
