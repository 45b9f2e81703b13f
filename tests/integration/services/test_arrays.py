"""Batch submission: job arrays and bulk creates, through the CLI and the API, on both backends."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.support.cluster import Cluster, poll
from tests.support.tenants import client, make_user

ENDED = {"TERMINATED", "CANCELLED", "ERROR"}


def _elements(c: Cluster, array_id: str) -> list[dict[str, Any]]:
    rows = c.corral_json("session", "list", "--array", array_id, "--limit", "1000")
    return list(rows)


def _settled(c: Cluster, array_id: str, timeout: float = 120) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        a = c.http.get(f"/api/v1/arrays/{array_id}").json()
        return a if a["settled"] else None

    return dict(poll(check, timeout, f"array {array_id} to settle"))


def test_an_array_of_50_is_one_transaction_and_each_element_sees_its_index(cluster: Cluster) -> None:
    done = cluster.corral(
        "run",
        "--array",
        "0-49",
        "--cpu",
        "0.1",
        "--name",
        "sweep",
        "--",
        "sh",
        "-c",
        "echo $CORRAL_ARRAY_INDEX",
    )
    assert done.returncode == 0, done.stderr
    assert "50 of 50 succeeded" in done.stderr
    array_id = done.stderr.split("corral: array ", 1)[1].split(":", 1)[0]
    elements = _elements(cluster, array_id)
    assert [e["array_index"] for e in elements] == list(range(50))  # indices as given: 0..49
    assert {e["array_id"] for e in elements} == {array_id}
    assert [e["name"] for e in elements] == [f"sweep[{i}]" for i in range(50)]
    # One transaction: every element was written at the same instant, by one statement.
    assert len({e["created_at"] for e in elements}) == 1
    for e in elements[::7]:
        assert cluster.output(e["id"]) == f"{e['array_index']}\n"
        assert (e["status"], e["result"]) == ("TERMINATED", "success")


def test_a_failed_element_is_retried_alone_and_the_array_exit_code_says_so(cluster: Cluster) -> None:
    # Element 2 fails; the CLI follows the array to its end and exits non-zero.
    done = cluster.corral(
        "run", "--array", "1-4", "--cpu", "0.1", "--", "sh", "-c", 'test "$CORRAL_ARRAY_INDEX" != 2'
    )
    assert done.returncode == 1, done.stderr
    assert "3 of 4 succeeded" in done.stderr
    array_id = done.stderr.split("corral: array ", 1)[1].split(":", 1)[0]
    failed = [e for e in _elements(cluster, array_id) if e["result"] != "success"]
    assert [(e["array_index"], e["exit_code"]) for e in failed] == [(2, 1)]

    # A retry of the whole array runs again only what did not succeed.
    again = cluster.corral_json("array", "retry", array_id)
    assert again["retried"] == 1
    settled = _settled(cluster, array_id)
    assert settled["size"] == 4 and settled["succeeded"] == 3  # element 2 fails again, same index
    rows = _elements(cluster, array_id)
    assert [(e["array_index"], e["attempt"]) for e in rows] == [(1, 1), (2, 1), (2, 2), (3, 1), (4, 1)]

    # One element retried on its own keeps its array and its index.
    latest = next(e for e in rows if (e["array_index"], e["attempt"]) == (2, 2))
    child = cluster.corral_json("session", "retry", latest["id"])
    assert (child["array_id"], child["array_index"], child["attempt"]) == (array_id, 2, 3)
    assert cluster.wait(child["id"])["exit_code"] == 1
    # Nothing else to run again: each element's latest attempt succeeded or is the one just made.
    assert cluster.http.post(f"/api/v1/arrays/{array_id}/retry").status_code in (201, 409)


def test_cancel_one_element_then_the_whole_array(cluster: Cluster) -> None:
    done = cluster.corral("run", "-d", "-o", "json", "--array", "0-5", "--cpu", "0.1", "--", "sleep", "600")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    array_id = made["array_id"]
    assert made["size"] == 6 and made["counts"] == {"PENDING": 6}
    ids = made["session_ids"]
    poll(
        lambda: cluster.http.get(f"/api/v1/arrays/{array_id}").json()["counts"].get("RUNNING") == 6,
        60,
        "every element to run",
    )
    cluster.corral_json("session", "cancel", ids[3])
    assert cluster.wait(ids[3])["cause"] == "user_cancelled"
    # The others are untouched by one element's cancel.
    assert {cluster.session(i)["status"] for i in ids if i != ids[3]} == {"RUNNING"}

    cancelled = cluster.corral("array", "cancel", array_id)
    assert cancelled.returncode == 0, cancelled.stderr
    settled = _settled(cluster, array_id)
    assert settled["succeeded"] == 0 and sum(settled["counts"].values()) == 6
    assert {cluster.session(i)["cause"] for i in ids} == {"user_cancelled"}
    # `corral array wait` on a settled array returns at once, non-zero: none succeeded.
    assert cluster.corral("array", "wait", "-q", array_id).returncode == 1


def test_a_replayed_array_or_bulk_create_makes_nothing_new(cluster: Cluster) -> None:
    key = f"arr-{uuid.uuid4()}"
    body = {"command": ["true"], "resources": {"cpu": 0.1}, "array": "0-2", "creation_id": key}
    first = cluster.http.post("/api/v1/sessions", json=body)
    assert first.status_code == 201, first.text
    replay = cluster.http.post("/api/v1/sessions", json=body)
    assert replay.status_code == 200, replay.text
    assert replay.json()["array_id"] == first.json()["array_id"]
    assert replay.json()["session_ids"] == first.json()["session_ids"]
    other = cluster.http.post("/api/v1/sessions", json={**body, "array": "0-3"})
    assert other.status_code == 409 and other.json()["error"]["details"]["field"] == "creation_id"

    items = [
        {"command": ["true"], "resources": {"cpu": 0.1}, "creation_id": f"{key}-{i}", "name": f"bulk-{i}"}
        for i in range(3)
    ]
    before = cluster.http.get("/api/v1/sessions/counts").json()
    made = cluster.http.post("/api/v1/sessions/bulk", json={"sessions": items})
    assert made.status_code == 201, made.text
    assert [m["created"] for m in made.json()["sessions"]] == [True, True, True]
    again = cluster.http.post("/api/v1/sessions/bulk", json={"sessions": items})
    assert again.status_code == 201, again.text
    assert [m["created"] for m in again.json()["sessions"]] == [False, False, False]
    ids = [m["session"]["id"] for m in made.json()["sessions"]]
    assert [m["session"]["id"] for m in again.json()["sessions"]] == ids
    after = cluster.http.get("/api/v1/sessions/counts").json()
    assert sum(after.values()) - sum(before.values()) == 3

    # All or none: a bad item (named by its place) leaves nothing behind, not even the good ones.
    fresh = [{**items[0], "creation_id": f"{key}-new"}, {**items[1], "creation_id": None, "project": "nope"}]
    bad = cluster.http.post("/api/v1/sessions/bulk", json={"sessions": fresh})
    assert bad.status_code == 422 and bad.json()["error"]["details"]["field"] == "sessions[1].project", (
        bad.text
    )
    assert sum(cluster.http.get("/api/v1/sessions/counts").json().values()) == sum(after.values())
    # A key reused for another request is a conflict named by its item.
    changed = cluster.http.post(
        "/api/v1/sessions/bulk", json={"sessions": [{**items[1], "command": ["false"]}]}
    )
    assert changed.status_code == 409
    assert changed.json()["error"]["details"]["field"] == "sessions[0].creation_id"
    dup = cluster.http.post("/api/v1/sessions/bulk", json={"sessions": [items[0], items[0]]})
    assert dup.status_code == 422 and dup.json()["error"]["details"]["field"] == "sessions[1].creation_id"
    for s in ids:
        cluster.wait(s)


def test_bad_arrays_are_refused_naming_the_field(cluster: Cluster) -> None:
    for spec in ("5-1", "0-20000", "a-b", "", "1-10:0", "0-2000000"):
        r = cluster.http.post("/api/v1/sessions", json={"command": ["true"], "array": spec})
        assert r.status_code == 422, (spec, r.text)
        assert "array" in r.text, r.text
    inner = {"command": ["true"], "array": "0-1"}
    r = cluster.http.post("/api/v1/sessions/bulk", json={"sessions": [inner]})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "sessions[0].array"
    bad = cluster.corral("run", "--array", "9-1", "--", "true")
    assert bad.returncode != 0 and "array" in bad.stderr


def test_another_projects_array_is_out_of_reach(cluster: Cluster) -> None:
    made = cluster.submit(command=["true"], resources={"cpu": 0.1}, array="0-1")
    array_id = made["array_id"]
    key = make_user(cluster, f"arr-{uuid.uuid4().hex[:6]}", [f"p-{uuid.uuid4().hex[:6]}"])
    with client(cluster, key) as other:
        assert other.get(f"/api/v1/arrays/{array_id}").status_code == 404
        assert other.post(f"/api/v1/arrays/{array_id}/cancel").status_code == 404
        assert other.post(f"/api/v1/arrays/{array_id}/retry").status_code == 404
        assert other.get("/api/v1/sessions", params={"array": array_id}).json() == []
    _settled(cluster, array_id)
