"""Exactly once under faults: a partition, two managers on one database, a crash mid-decision."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from tests.integration.agent.test_fencing import FENCE, KERNEL, DeathWatch
from tests.integration.manager.test_retry import metric, settled_chain, stamp
from tests.support.cluster import Cluster, poll
from tests.support.db import sql
from tests.support.proxy import Proxy

FAILING = {
    "command": ["sh", "-c", "exit 3"],
    "resources": {"cpu": 0.1},
    "retry_policy": {"max_retries": 1, "retry_delay": 0},
}


def test_the_parent_is_dead_before_its_child_starts(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    c = own_cluster(env=FENCE)
    proxy = Proxy(c.port)
    try:
        c.start_agent("far", manager_url=proxy.url)
        c.start_agent("near")
        k, g = tmp_path / "k.pid", tmp_path / "g.pid"
        first_attempt = KERNEL.format(k=k, g=g)
        later = "python3 -c 'import time; print(time.time())'"
        script = f'if [ "$CORRAL_ATTEMPT" = 1 ]; then {first_attempt}; else {later}; fi'
        s = c.submit(command=["sh", "-c", script], retry_policy={"max_retries": 1, "retry_delay": 0})
        c.wait(s["id"], {"RUNNING"})
        assert c.session(s["id"])["kernels"][0]["agent"] == "far"
        poll(lambda: all(p.exists() and p.read_text().strip() for p in (k, g)), 20, "the pid files")
        watch = DeathWatch([int(k.read_text()), int(g.read_text())])
        proxy.blackhole()

        parent, child = settled_chain(c, s["id"], 2, timeout=60)
        assert (parent["cause"], child["kernels"][0]["agent"]) == ("agent_transient", "near")
        watch.join(timeout=10)
        assert watch.died_at is not None, "the first attempt outlived its retry"
        child_started = float(c.output(child["id"]).strip())
        assert watch.died_at < child_started, f"overlap of {watch.died_at - child_started:.3f}s"
        assert watch.died_at < stamp(child["created_at"]), "the child was made before the parent died"
    finally:
        proxy.close()


def test_two_managers_decide_each_attempt_once(own_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    # The manager running the scheduling loop is told at once of each attempt that ended; the other
    # (on SQLite: no NOTIFY) finds them by polling.  Room for all 50 at once ends them together: a
    # pile to decide, of which the poller gets a share.
    env = {"CORRAL_RETRY_POLL": "0.01"}
    c = own_cluster(env=env)
    second = Cluster(c.database_url, tmp_path / "second-manager", env)
    try:
        c.start_agent("agent-a", cpu=25)
        c.start_agent("agent-b", cpu=25)
        # The scheduling loop is the first manager's: the group's lease is taken by whichever
        # manager notices the group first (each looks every 5 s), so the second starts after it.
        warm = c.submit(command=["true"], resources={"cpu": 0.1})["id"]
        c.wait(warm)
        decided = "SELECT retry_state FROM sessions WHERE id = :id"
        poll(lambda: sql(c.database_url, decided, id=warm)[0][0] is not None, 30, "the warm-up's decision")
        before = metric(c, "corral_retry_decisions_total")
        lost_before = metric(c, "corral_retry_already_decided_total")
        second.start_manager()
        firsts = [c.submit(**FAILING)["id"] for _ in range(50)]
        for sid in firsts:
            settled_chain(c, sid, 2, timeout=120)
        assert sum(c.http.get("/api/v1/sessions/counts").json().values()) == 101
        mine = metric(c, "corral_retry_decisions_total") - before
        theirs = metric(second, "corral_retry_decisions_total")
        assert mine + theirs == 100, "an attempt was decided twice (or not at all)"
        # Raced: both decided some, or one read attempts undecided that the other decided before
        # it could claim them.  Which wins how many is up to their speeds: the idle second manager,
        # deciding as fast as the first commits, may take every one while the first waits for its
        # own writer.
        lost = (
            metric(c, "corral_retry_already_decided_total")
            - lost_before
            + metric(second, "corral_retry_already_decided_total")
        )
        assert (mine > 0 and theirs > 0) or lost > 0, f"they did not race: {mine} and {theirs} decisions"
        retried = metric(c, "corral_session_retry_scheduled_total") + metric(
            second, "corral_session_retry_scheduled_total"
        )
        assert retried == 50
    finally:
        second.close()


def cursor(c: Cluster) -> int:
    rows = sql(c.database_url, "SELECT position FROM event_cursors WHERE consumer = 'retry-engine'")
    return int(rows[0][0]) if rows else 0


def test_a_crash_between_decision_and_commit_and_a_replay_make_one_child(
    own_cluster: Callable[..., Cluster],
) -> None:
    hook = "CORRAL_TEST_CRASH_BEFORE_RETRY_COMMIT"
    c = own_cluster(env={hook: "1", "CORRAL_RETRY_EVENT_GRACE": "1"})
    c.start_agent("agent-a")
    s = c.submit(**FAILING)
    assert c.manager is not None
    poll(lambda: c.manager is not None and c.manager.poll() is not None, 60, "the manager to die at the hook")
    assert c.manager.returncode == -9
    del c.env[hook]
    c.start_manager()
    chain = settled_chain(c, s["id"], 2)
    assert chain[1]["parent_session_id"] == s["id"]
    assert sum(c.http.get("/api/v1/sessions/counts").json().values()) == 2

    # Replaying the whole events table (a restart with the cursor at 0) decides nothing again.
    last = int(sql(c.database_url, "SELECT max(id) FROM session_events")[0][0])
    poll(lambda: cursor(c) >= last, 30, "the cursor to pass every event")
    c.kill_manager()
    sql(c.database_url, "UPDATE event_cursors SET position = 0 WHERE consumer = 'retry-engine'")
    c.start_manager()
    poll(lambda: cursor(c) >= last, 30, "the engine to read the events table again")
    assert sum(c.http.get("/api/v1/sessions/counts").json().values()) == 2
    assert len(settled_chain(c, s["id"], 2)) == 2


def test_an_attempt_whose_event_was_passed_over_is_still_decided(
    own_cluster: Callable[..., Cluster],
) -> None:
    # As when a transaction commits an earlier event id after a later one was read (PostgreSQL).
    c = own_cluster(env={"CORRAL_RETRY_EVENT_GRACE": "1"})
    c.start_agent("agent-a")
    c.kill_manager()
    sql(
        c.database_url,
        "INSERT INTO event_cursors (consumer, position, updated_at) VALUES ('retry-engine', 1000000000, :t)",
        t=datetime.now(UTC),
    )
    c.start_manager()
    s = c.submit(**FAILING)
    chain = settled_chain(c, s["id"], 2, timeout=60)
    assert chain[0]["retry_state"] == "exhausted" or chain[1]["retry_reason"] is not None


def test_a_stored_category_that_cannot_be_used_stops_the_manager_naming_it(
    own_cluster: Callable[..., Cluster],
) -> None:
    c = own_cluster()
    categories = [{"name": "fine", "on_log_tail": {"pattern": "x"}}]
    assert c.http.patch("/api/v1/cluster-config", json={"failure_categories": categories}).status_code == 200
    c.kill_manager()
    broken = json.dumps([*categories, {"name": "broken", "on_log_tail": {"pattern": "(unclosed"}}])
    value = ":v" if c.database_url.startswith("sqlite") else "CAST(:v AS JSON)"
    sql(
        c.database_url,
        f"UPDATE cluster_config SET value = {value} WHERE key = 'failure_categories'",
        v=broken,
    )
    env = {
        **c.env,
        "CORRAL_DATABASE_URL": c.database_url,
        "CORRAL_PORT": str(c.port),
        "CORRAL_AGENT_TOKEN": c.token,
    }
    done = subprocess.run(
        [sys.executable, "-m", "corral", "manager"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "failure_categories.1.on_log_tail.pattern" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
