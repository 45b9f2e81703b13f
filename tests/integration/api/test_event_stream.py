"""`GET /api/v1/events/stream` on a real manager, both backends: the events `GET /events` returns,
as they commit; resumed with `Last-Event-ID` with nothing missed or repeated; a subscriber too slow
for its queue told to resync; only the caller's projects."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from corral.client import Client
from tests.support.cluster import Cluster, poll
from tests.support.sse import Subscriber
from tests.support.tenants import client, make_user


def _events_of(cluster: Cluster, session_id: str, after: str | None = None) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"session": session_id, "limit": 1000}
    if after is not None:
        params["after"] = after
    resp = cluster.http.get("/api/v1/events", params=params)
    assert resp.status_code == 200, resp.text
    return list(resp.json())


def _ended(events: list[dict[str, Any]]) -> bool:
    return any(e["to_status"] in ("TERMINATED", "ERROR", "CANCELLED") for e in events)


def test_the_stream_starts_after_the_newest_and_carries_what_get_events_returns(cluster: Cluster) -> None:
    before = cluster.submit(command=["true"])
    cluster.wait(before["id"])
    sub = Subscriber(cluster.url, cluster.key)
    try:
        poll(sub.opened, 30, "the stream to open")
        assert sub.status == 200
        s = cluster.submit(command=["true"])
        poll(
            lambda: _ended([e for e in sub.events if e["session_id"] == s["id"]]), 60, "its end on the stream"
        )
        streamed = [m for m in sub.messages if m.json()["session_id"] == s["id"]]
        assert [m.json() for m in streamed] == _events_of(cluster, s["id"])  # exactly as GET returns
        assert all(m.id == m.json()["position"] and m.event == m.json()["type"] for m in streamed)
        assert before["id"] not in {e["session_id"] for e in sub.events}  # from after the newest
        positions = [m.json()["position"] for m in sub.messages]
        assert len(set(positions)) == len(positions)
    finally:
        sub.close()


def test_a_subscriber_resuming_after_event_k_gets_k_plus_1_on_exactly_once(cluster: Cluster) -> None:
    s = cluster.submit(command=["sh", "-c", "sleep 1"], cluster_size=2)
    cluster.wait(s["id"])
    every = _events_of(cluster, s["id"])
    assert len(every) >= 6
    k = 3
    first = Subscriber(cluster.url, cluster.key, params={"session": s["id"]}, last_id="0")
    try:
        poll(lambda: len(first.events) >= len(every), 30, "the whole history from position 0")
        assert first.events == every
    finally:
        first.close()
    again = Subscriber(
        cluster.url, cluster.key, params={"session": s["id"]}, last_id=every[k - 1]["position"]
    )
    try:
        poll(lambda: len(again.events) >= len(every) - k, 30, "the events after k")
        assert again.events == every[k:]  # in order, none missed, none repeated
        by_query = Subscriber(
            cluster.url, cluster.key, params={"session": s["id"], "after": every[k]["position"]}
        )
        try:
            poll(lambda: len(by_query.events) >= len(every) - k - 1, 30, "the events after k+1")
            assert by_query.events == every[k + 1 :]
        finally:
            by_query.close()
    finally:
        again.close()


def test_a_slow_subscriber_is_told_to_resync_and_loses_nothing(own_cluster: Callable[..., Cluster]) -> None:
    """With a queue of 3, ten sessions made in one transaction (one read of the feed) overflow it:
    the stream sends what it holds, then `event: resync` naming where to go on, and ends; read on
    from there, the rest comes once each.  The manager let go of the subscriber."""
    cluster = own_cluster(env={"CORRAL_STREAM_QUEUE": "3"})
    sub = Subscriber(cluster.url, cluster.key, params={"type": "session.created"})
    try:
        poll(sub.opened, 30, "the stream to open")
        bulk = cluster.http.post("/api/v1/sessions/bulk", json={"sessions": [{"command": ["true"]}] * 10})
        assert bulk.status_code in (200, 201), bulk.text
        assert sub.ended.wait(30), "the stream did not end on resync"
        assert sub.messages[-1].event == "resync"
        resume = sub.messages[-1].json()["after"]
        got = sub.events
        assert len(got) <= 3 and (not got or got[-1]["position"] == resume)
    finally:
        sub.close()
    rest = Subscriber(cluster.url, cluster.key, params={"type": "session.created"}, last_id=resume)
    try:
        poll(lambda: len(got) + len(rest.events) >= 10, 30, "the rest after the resync")
        ids = [e["session_id"] for e in got + rest.events]
        assert (
            sorted(ids) == sorted(s["session"]["id"] for s in bulk.json()["sessions"]) and len(set(ids)) == 10
        )
    finally:
        rest.close()
    metrics = cluster.http.get("/metrics").text
    assert "corral_event_stream_resyncs_total 1.0" in metrics
    poll(
        lambda: "corral_event_stream_subscribers 0.0" in cluster.http.get("/metrics").text,
        30,
        "no subscriber",
    )


def test_a_user_streams_only_their_projects_events(cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    alice_key = make_user(cluster, f"alice-{tag}", [f"a-{tag}"])
    bob_key = make_user(cluster, f"bob-{tag}", [f"b-{tag}"])
    bob = Subscriber(cluster.url, bob_key)
    with client(cluster, alice_key) as alice, client(cluster, bob_key) as bobs:
        try:
            poll(bob.opened, 30, "bob's stream to open")
            hers = alice.post("/api/v1/sessions", json={"command": ["true"], "project": f"a-{tag}"})
            assert hers.status_code == 201, hers.text
            his = bobs.post("/api/v1/sessions", json={"command": ["true"], "project": f"b-{tag}"})
            cluster.wait(hers.json()["id"])
            poll(lambda: _ended(bob.events), 60, "bob's own session's end")
            assert {e["project"] for e in bob.events} == {f"b-{tag}"}
            assert his.json()["id"] in {e["session_id"] for e in bob.events}
        finally:
            bob.close()
        theirs = bobs.get("/api/v1/events/stream", params={"project": f"a-{tag}"})
        assert theirs.status_code == 403 and theirs.json()["error"]["details"]["field"] == "project"


def test_bad_positions_and_types_are_refused_naming_the_field(cluster: Cluster) -> None:
    for headers, params, field in (
        ({"Last-Event-ID": "12-x"}, {}, "last-event-id"),
        ({}, {"after": "-3"}, "after"),
        ({}, {"type": "session.nope"}, "type"),
        ({}, {"after": "9" * 61}, "after"),
    ):
        resp = cluster.http.get("/api/v1/events/stream", headers=headers, params=params)
        assert resp.status_code == 422, (field, resp.text)
        assert field in resp.text


def test_the_client_follows_the_stream_through_a_manager_restart(own_cluster: Callable[..., Cluster]) -> None:
    cluster = own_cluster()
    cluster.start_agent("agent-a", cpu=2)
    got: list[Any] = []
    with Client(cluster.url, cluster.key) as corral:
        first = corral.sessions.submit(command=["true"])
        start = corral.events.list(session=first.id, limit=1)[0].position

        stopping = threading.Event()

        def read() -> None:
            with Client(cluster.url, cluster.key) as theirs:
                for e in theirs.stream_events(start, type=["session.status_changed"]):
                    if stopping.is_set():
                        return  # closes the stream and its connection
                    got.append(e)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        corral.wait(first.id)
        poll(
            lambda: any(e.session_id == first.id and e.to_status == "TERMINATED" for e in got),
            60,
            "first's end",
        )
        cluster.kill_manager()
        cluster.start_manager()
        second = corral.sessions.submit(command=["true"])
        corral.wait(second.id)
        poll(
            lambda: any(e.session_id == second.id and e.to_status == "TERMINATED" for e in got),
            60,
            "second's end",
        )
        expected = corral.events.list(start, type=["session.status_changed"], limit=1000)
        stopping.set()
        corral.wait(corral.sessions.submit(command=["true"]).id)  # an event to wake the reader
        reader.join(30)
        assert not reader.is_alive()
    positions = [e.position for e in got]
    assert positions[: len(expected)] == [e.position for e in expected]  # none missed, none twice


def test_an_open_stream_ends_once_its_key_is_revoked(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster({"CORRAL_STREAM_RECHECK": "0.5"})
    tag = uuid.uuid4().hex[:6]
    key = make_user(c, f"rev-{tag}", [f"r-{tag}"])
    sub = Subscriber(c.url, key)
    try:
        poll(sub.opened, 30, "the stream to open")
        [kept] = c.http.get(f"/api/v1/users/rev-{tag}/keys").json()
        assert c.http.delete(f"/api/v1/users/rev-{tag}/keys/{kept['id']}").status_code == 204
        assert sub.ended.wait(30), "the stream outlived its revoked key"
    finally:
        sub.close()
