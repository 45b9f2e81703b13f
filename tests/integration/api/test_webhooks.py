"""The webhook routes on a real manager, both backends: bad input refused naming the field and
writing nothing; the secret shown once; and two users, each seeing and changing only their own
project's webhooks.  (Deliveries themselves: tests/integration/manager/test_deliveries.py.)"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.support.cluster import Cluster
from tests.support.tenants import client, make_user

# A global address, so no DNS and no SSRF refusal; the webhooks here are created disabled, so
# nothing is ever sent to it.
PUBLIC = "https://93.184.216.34/hook"


def _made(http: httpx.Client, **body: Any) -> dict[str, Any]:
    resp = http.post(
        "/api/v1/webhooks", json={"url": PUBLIC, "events": ["session.*"], "enabled": False, **body}
    )
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def _field(resp: httpx.Response) -> str:
    assert 400 <= resp.status_code < 500, resp.text
    return str(resp.json()["error"]["details"].get("field"))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://93.184.216.34/"}, "url"),
        ({"url": "https://me:pw@93.184.216.34/"}, "url"),
        ({"url": "https://93.184.216.34/" + "a" * 2048}, "url"),
        ({"url": "http://127.0.0.1:9/"}, "url"),  # private, and not allowed by default
        ({"url": ""}, "url"),
        ({"url": 7}, "url"),
        ({"events": ["nothing.*"]}, "events"),
        ({"events": []}, "events"),
        ({"events": "session.*"}, "events"),
        ({"events": ["session.created", 3]}, "events.1"),
        ({"enabled": "yes"}, "enabled"),
        ({"description": "x" * 300}, "description"),
        ({"project": "no such project/"}, "project"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_writes_nothing(
    cluster: Cluster, body: dict[str, Any], field: str
) -> None:
    before = cluster.http.get("/api/v1/webhooks").json()
    resp = cluster.http.post("/api/v1/webhooks", json={"url": PUBLIC, "events": ["session.*"], **body})
    assert _field(resp) == field, resp.text
    assert "Traceback" not in resp.text
    assert cluster.http.get("/api/v1/webhooks").json() == before


def test_a_private_target_names_the_setting_that_allows_it(cluster: Cluster) -> None:
    resp = cluster.http.post("/api/v1/webhooks", json={"url": "http://localhost:9/", "events": ["session.*"]})
    assert _field(resp) == "url" and "webhooks.allow_private" in resp.json()["error"]["message"]


def test_the_secret_is_shown_at_creation_and_rotation_only(cluster: Cluster) -> None:
    made = _made(cluster.http, description="ci")
    secret = made["secret"]
    assert secret.startswith("whsec_") and made["enabled"] is False
    shown = [
        cluster.http.get(f"/api/v1/webhooks/{made['id']}").text,
        cluster.http.get("/api/v1/webhooks").text,
    ]
    assert all(secret not in text and "whsec_" not in text for text in shown)
    rotated = cluster.http.post(f"/api/v1/webhooks/{made['id']}/rotate-secret").json()
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != secret
    until = datetime.fromisoformat(rotated["previous_secret_until"])
    assert timedelta(hours=23) < until - datetime.fromisoformat(rotated["updated_at"]) <= timedelta(hours=24)
    assert rotated["secret"] not in cluster.http.get(f"/api/v1/webhooks/{made['id']}").text


def test_an_update_changes_only_what_is_given(cluster: Cluster) -> None:
    made = _made(cluster.http, description="before")
    resp = cluster.http.patch(f"/api/v1/webhooks/{made['id']}", json={"events": ["session.retry_*"]})
    assert resp.status_code == 200, resp.text
    after = resp.json()
    assert (after["events"], after["description"], after["url"]) == (["session.retry_*"], "before", PUBLIC)
    bad = cluster.http.patch(f"/api/v1/webhooks/{made['id']}", json={"url": "gopher://x/"})
    assert _field(bad) == "url"
    assert cluster.http.get(f"/api/v1/webhooks/{made['id']}").json()["url"] == PUBLIC
    assert cluster.http.delete(f"/api/v1/webhooks/{made['id']}").status_code == 204
    assert cluster.http.get(f"/api/v1/webhooks/{made['id']}").status_code == 404


def test_testing_a_disabled_webhook_says_to_enable_it(cluster: Cluster) -> None:
    made = _made(cluster.http)
    resp = cluster.http.post(f"/api/v1/webhooks/{made['id']}/test")
    assert _field(resp) == "enabled" and "enable" in resp.json()["error"]["message"]


def test_each_user_sees_and_changes_only_their_projects_webhooks(cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    alice = client(cluster, make_user(cluster, f"alice-{tag}", [f"a-{tag}"]))
    bob = client(cluster, make_user(cluster, f"bob-{tag}", [f"b-{tag}"]))
    try:
        hers = _made(alice, project=f"a-{tag}")
        admins = _made(cluster.http)  # cluster-wide: admins only
        assert [w["id"] for w in alice.get("/api/v1/webhooks").json()] == [hers["id"]]
        assert bob.get("/api/v1/webhooks").json() == []
        listed = {w["id"] for w in cluster.http.get("/api/v1/webhooks").json()}
        assert {hers["id"], admins["id"]} <= listed
        for target in (hers["id"], admins["id"]):
            base = f"/api/v1/webhooks/{target}"
            for resp in (
                bob.get(base),
                bob.patch(base, json={"enabled": True}),
                bob.delete(base),
                bob.post(f"{base}/rotate-secret"),
                bob.post(f"{base}/test"),
                bob.get(f"{base}/deliveries"),
                bob.post(f"{base}/deliveries/1/redeliver"),
            ):
                assert resp.status_code == 404, (resp.request.method, resp.request.url, resp.text)
        assert alice.get(f"/api/v1/webhooks/{admins['id']}").status_code == 404
        assert cluster.http.get(f"/api/v1/webhooks/{hers['id']}").json()["enabled"] is False  # unchanged
        # A member's webhook names one of their projects: neither cluster-wide nor another's.
        wide = alice.post("/api/v1/webhooks", json={"url": PUBLIC, "events": ["session.*"]})
        assert _field(wide) == "project"
        theirs = alice.post("/api/v1/webhooks", json={"url": PUBLIC, "events": ["*"], "project": f"b-{tag}"})
        assert theirs.status_code == 403 and _field(theirs) == "project"
        moved = alice.patch(f"/api/v1/webhooks/{hers['id']}", json={"project": f"b-{tag}"})
        assert moved.status_code == 403 and _field(moved) == "project"
    finally:
        alice.close()
        bob.close()
