"""Two managers on one PostgreSQL database wake each other (LISTEN/NOTIFY): a session submitted
through manager B is placed by manager A, which holds the group's lease, at once — not at A's next
poll, which here is 30 s away — and reaches an agent long-polling B."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.cluster import Cluster

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
