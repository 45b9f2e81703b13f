"""Two managers on one PostgreSQL database wake each other (LISTEN/NOTIFY): a session submitted
through manager B is placed by manager A, which holds the group's lease, at once — not at A's next
poll, which here is 30 s away — and reaches an agent long-polling B."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from corral.store.dialect.postgresql_notify import CHANNEL, HELLO, Notifier
from corral.wakeup import Wakeup
from tests.support.cluster import Cluster
from tests.support.eventually import eventually

SLOW_POLL = {"CORRAL_LOOP_INTERVAL": "30"}


def started_after(s: dict[str, str]) -> float:
    return (datetime.fromisoformat(s["started_at"]) - datetime.fromisoformat(s["created_at"])).total_seconds()


@pytest.mark.serial  # a time bound: other tests' load would skew it
def test_a_session_submitted_through_another_manager_runs_without_waiting_a_poll(
    fresh_database: Callable[[str], str], tmp_path: Path
) -> None:
    url = fresh_database("postgres")
    a = Cluster(url, tmp_path / "a", SLOW_POLL)
    b = Cluster(url, tmp_path / "b", SLOW_POLL)
    b.key, b.token = a.key, a.token  # one installation: the same admin key and agent token
    b.http.headers["Authorization"] = f"Bearer {a.key}"
    try:
        a.start_manager()
        a.start_agent("agent-a", cpu=1)
        # A places this one, so A holds the group's lease from now on (and B never takes it over:
        # the lease outlives the test).
        warm = a.wait(a.submit(command=["true"])["id"], timeout=60)
        assert warm["result"] == "success", warm
        filler = a.submit(command=["sleep", "600"], resources={"cpu": 1})["id"]
        a.wait(filler, {"RUNNING"}, timeout=60)
        b.start_manager()
        b.start_agent("agent-b", cpu=1, manager_url=b.url)  # long-polls B only

        s = b.wait(b.submit(command=["true"], resources={"cpu": 1})["id"], timeout=60)
        assert s["result"] == "success", s
        assert [k["agent"] for k in s["kernels"]] == ["agent-b"]
        assert started_after(s) < 5.0, f"started {started_after(s):.1f}s after submission: A polled"
    finally:
        b.close()
        a.close()


async def test_a_manager_alone_sends_no_wake_ups_and_one_joining_is_told_them(
    fresh_database: Callable[[str], str],
) -> None:
    """A NOTIFY is a round trip that comes back to its sender: nobody else listening, none is sent.
    A second manager says hello and is answered, and from then on each wakes the other."""
    url = make_url(fresh_database("postgres"))
    heard: list[str] = []
    spy = await asyncpg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False))
    await spy.add_listener(CHANNEL, lambda *args: heard.append(args[-1]))
    b_wakeup = Wakeup()
    a, b = Notifier(url, Wakeup()), Notifier(url, b_wakeup)
    tasks = [asyncio.create_task(a.run())]
    try:
        await eventually(lambda: any(h.endswith(":hello") for h in heard), "the first manager's hello")
        a.send("orders")
        a.send("retries")
        assert a.peers == 0
        tasks.append(asyncio.create_task(b.run()))
        # Well before the first's next hello (HELLO seconds after its first): it answered the second's.
        await eventually(lambda: a.peers == 1 and b.peers == 1, "the two managers know each other", HELLO / 3)
        seen = b_wakeup.room_version
        a.send("scheduler")
        await eventually(lambda: b_wakeup.room_version > seen, "the second manager woken by the first")
        await eventually(lambda: sum(h.endswith(":scheduler") for h in heard) == 1, "the wake-up on the wire")
        senders = {h.split(":")[0] for h in heard}
        assert len(senders) == 2  # the spy, not a manager, is nobody's peer
        assert not any(h.endswith((":orders", ":retries")) for h in heard), heard
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await a.shutdown()
        await b.shutdown()
        await spy.close()
