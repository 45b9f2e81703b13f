"""Webhook deliveries (manager/deliveries.py) from a real manager to a real receiver, both
backends: signed so the standardwebhooks library accepts them, retried on the backoff schedule,
disabled by a 410, at-least-once across a manager's kill -9, one deliverer at a time."""

from __future__ import annotations

import itertools
import json
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from corral.domain.events import Position
from corral.manager.deliveries import RECORD_BATCH
from tests.support.cluster import Cluster, poll
from tests.support.receiver import Received, Receiver

FAST = {
    "CORRAL_WEBHOOK_BACKOFF": "[0.4, 0.8, 1.6]",
    "CORRAL_WEBHOOK_LEASE": "2",
    "CORRAL_WEBHOOK_POLL": "0.05",
}


def _allow_private(c: Cluster) -> None:
    resp = c.http.patch("/api/v1/cluster-config", json={"webhooks": {"allow_private": True}})
    assert resp.status_code == 200, resp.text


def _hook(c: Cluster, url: str, events: list[str], **more: Any) -> dict[str, Any]:
    resp = c.http.post("/api/v1/webhooks", json={"url": url, "events": events, **more})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def _deliveries(c: Cluster, webhook_id: str) -> list[dict[str, Any]]:
    resp = c.http.get(f"/api/v1/webhooks/{webhook_id}/deliveries")
    assert resp.status_code == 200, resp.text
    return list(resp.json())


def _recorded(c: Cluster, webhook_id: str) -> list[dict[str, Any]]:
    """The deliveries once one is recorded delivered: a receiver gets a delivery before its row
    is written (2xx answers are recorded in batches, after the sending)."""
    return list(
        poll(
            lambda: (
                (found := _deliveries(c, webhook_id))
                and any(d["status"] == "delivered" for d in found)
                and found
            ),
            30,
            "the delivery's record",
        )
    )


def _created(r: Received) -> str | None:
    body = r.json()
    return body["data"]["session_id"] if body["type"] == "session.created" else None


def test_every_delivery_verifies_and_a_tampered_one_does_not(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster(FAST)
    _allow_private(c)
    with Receiver() as rx:
        hook = _hook(c, rx.url, ["session.*"])
        secret = hook["secret"]
        assert secret.startswith("whsec_")
        assert "secret" not in c.http.get(f"/api/v1/webhooks/{hook['id']}").json()
        made = [c.submit(command=["true"])["id"] for _ in range(3)]
        poll(lambda: {_created(r) for r in rx.received} >= set(made), 30, "the three session.created")
        for r in rx.received:
            Webhook(secret).verify(r.body, r.headers)  # raises unless the signature holds
            body = r.json()
            assert set(body) == {"type", "timestamp", "data"}
            assert r.headers["webhook-id"] == f"msg_{body['data']['position']}"
        first = rx.received[0]
        listed = c.http.get("/api/v1/events", params={"session": _created(first)}).json()
        assert first.json()["data"] == listed[0]  # the event's JSON exactly as GET /events has it
        with pytest.raises(WebhookVerificationError):
            Webhook(secret).verify(first.body.replace(b"session", b"sessiom", 1), first.headers)
        other = "whsec_" + "QUJD" * 8
        with pytest.raises(WebhookVerificationError):
            Webhook(other).verify(first.body, first.headers)
        order = [Position.parse(r.json()["data"]["position"]) for r in rx.received]
        assert order == sorted(order)  # in commit order (ids are not, on PostgreSQL)


def test_a_failing_receiver_gets_the_event_again_with_growing_gaps(
    own_cluster: Callable[..., Cluster],
) -> None:
    c = own_cluster(FAST)
    _allow_private(c)
    with Receiver(lambda r, nth: 500 if nth < 3 else 200) as rx:
        hook = _hook(c, rx.url, ["webhook.test", "session.created"])
        assert c.http.post(f"/api/v1/webhooks/{hook['id']}/test").status_code == 202
        later = c.submit(command=["true"])["id"]
        poll(
            lambda: any(_created(r) == later for r in rx.received),
            30,
            "the later event, once the first passed",
        )
        tests = [r for r in rx.received if r.json()["type"] == "webhook.test"]
        assert len(tests) == 4 and len({r.webhook_id for r in tests}) == 1  # the same webhook-id
        gaps = [b.at - a.at for a, b in itertools.pairwise(tests)]
        assert gaps[0] < gaps[1] < gaps[2], gaps
        assert rx.received.index(tests[-1]) < len(rx.received) - 1  # the later event waited for it
        [done] = [d for d in _deliveries(c, hook["id"]) if d["event_type"] == "webhook.test"]
        assert (done["status"], done["attempts"], done["response_code"]) == ("delivered", 4, 200)


def test_a_410_disables_the_webhook_with_an_event_and_an_audit_row(
    own_cluster: Callable[..., Cluster],
) -> None:
    c = own_cluster(FAST)
    _allow_private(c)
    with Receiver(lambda r, nth: 410) as rx:
        hook = _hook(c, rx.url, ["webhook.test"])
        c.http.post(f"/api/v1/webhooks/{hook['id']}/test")
        poll(lambda: not c.http.get(f"/api/v1/webhooks/{hook['id']}").json()["enabled"], 30, "the disable")
        shown = c.http.get(f"/api/v1/webhooks/{hook['id']}").json()
        assert "410" in shown["disabled_reason"]
        assert len(rx.received) == 1
        events = c.http.get("/api/v1/events", params={"type": "webhook.disabled"}).json()
        assert [e["entity_id"] for e in events] == [hook["id"]]
        audit = c.http.get("/api/v1/audit", params={"action": "webhook.disable"}).json()
        assert [a["target"] for a in audit] == [hook["id"]]


def test_a_manager_killed_after_the_200_delivers_the_event_again(own_cluster: Callable[..., Cluster]) -> None:
    """The fault hook holds a 2xx before its record: kill -9 there, start again without it."""
    c = own_cluster({**FAST, "CORRAL_TEST_WEBHOOK_HOLD": "1"})
    _allow_private(c)
    with Receiver() as rx:
        hook = _hook(c, rx.url, ["webhook.test"])
        c.http.post(f"/api/v1/webhooks/{hook['id']}/test")
        poll(lambda: len(rx.received) == 1, 30, "the first delivery")
        c.kill_manager()
        c.env.pop("CORRAL_TEST_WEBHOOK_HOLD")
        c.start_manager()
        poll(lambda: len(rx.received) == 2, 30, "the delivery again after the restart")
        assert rx.received[0].webhook_id == rx.received[1].webhook_id
        [done] = _recorded(c, hook["id"])
        assert done["status"] == "delivered"
        c.http.post(f"/api/v1/webhooks/{hook['id']}/test")
        poll(lambda: len(rx.received) == 3, 30, "the next event")  # the cursor moved past the first
        assert rx.received[2].webhook_id != rx.received[0].webhook_id


def test_redelivery_sends_the_same_webhook_id(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster(FAST)
    _allow_private(c)
    with Receiver() as rx:
        hook = _hook(c, rx.url, ["webhook.test"])
        c.http.post(f"/api/v1/webhooks/{hook['id']}/test")
        poll(lambda: len(rx.received) == 1, 30, "the delivery")
        [done] = _recorded(c, hook["id"])
        resp = c.http.post(f"/api/v1/webhooks/{hook['id']}/deliveries/{done['event_id']}/redeliver")
        assert resp.status_code == 202, resp.text
        poll(lambda: len(rx.received) == 2, 30, "the redelivery")
        assert rx.received[1].webhook_id == rx.received[0].webhook_id == done["webhook_id"]
        missing = c.http.post(f"/api/v1/webhooks/{hook['id']}/deliveries/999999/redeliver")
        assert missing.status_code == 404


def test_a_rotated_secret_signs_beside_the_new_one(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster(FAST)
    _allow_private(c)
    with Receiver() as rx:
        hook = _hook(c, rx.url, ["webhook.test"])
        rotated = c.http.post(f"/api/v1/webhooks/{hook['id']}/rotate-secret").json()
        assert rotated["secret"] != hook["secret"] and rotated["previous_secret_until"]
        c.http.post(f"/api/v1/webhooks/{hook['id']}/test")
        poll(lambda: len(rx.received) == 1, 30, "the delivery")
        got = rx.received[0]
        assert len(got.headers["webhook-signature"].split(" ")) == 2
        Webhook(hook["secret"]).verify(got.body, got.headers)
        Webhook(rotated["secret"]).verify(got.body, got.headers)


def test_a_private_target_fails_unless_allowed(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster(FAST)
    with Receiver() as rx:
        refused = c.http.post("/api/v1/webhooks", json={"url": rx.url, "events": ["webhook.test"]})
        error = refused.json()["error"]
        assert refused.status_code == 422 and error["details"]["field"] == "url"
        assert "private" in error["message"]
        _allow_private(c)
        hook = _hook(c, rx.url, ["webhook.test"])
        resp = c.http.patch("/api/v1/cluster-config", json={"webhooks": {"allow_private": False}})
        assert resp.status_code == 200
        c.http.post(f"/api/v1/webhooks/{hook['id']}/test")
        poll(lambda: _deliveries(c, hook["id"]), 30, "the refused attempt")
        [tried] = _deliveries(c, hook["id"])
        assert tried["status"] == "pending" and "private" in tried["error"] and not rx.received


@pytest.mark.parametrize("own_cluster", ["postgres"], indirect=True)
def test_two_managers_never_deliver_one_webhook_at_once(own_cluster: Callable[..., Cluster]) -> None:
    first = own_cluster(FAST)
    second = Cluster(first.database_url, first.workdir.parent / "second", FAST)
    second.key = first.key
    second.http.headers["Authorization"] = f"Bearer {first.key}"
    try:
        second.start_manager()
        _allow_private(first)
        with Receiver(delay=0.05) as rx:
            hook = _hook(first, rx.url, ["session.created"])
            made = [first.submit(command=["true"])["id"] for _ in range(20)]
            poll(lambda: {_created(r) for r in rx.received} >= set(made[:10]), 60, "half delivered")
            os.kill(first.manager.pid, signal.SIGKILL)  # type: ignore[union-attr]
            first.manager.wait()  # type: ignore[union-attr]
            poll(lambda: {_created(r) for r in rx.received} >= set(made), 60, "the rest by the other")
            assert rx.most_in_flight == 1
            ids = [_created(r) for r in rx.received]
            # Again at most what was in flight at the kill: answered 2xx, not yet recorded (a batch).
            assert len(ids) - len(set(ids)) <= RECORD_BATCH
            assert json.loads(rx.received[-1].body)["type"] == "session.created"
            assert hook["id"]
    finally:
        second.close()
