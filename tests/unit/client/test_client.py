"""The client against a real app in-process: typed results, and the API's errors as exceptions."""

from __future__ import annotations

import pytest

from corral.client import AsyncClient, Client, CorralError, InvalidRequest, NoApiKey
from corral.client.models import Session


def test_a_submitted_session_reads_back_typed(client: Client) -> None:
    s = client.sessions.submit(command=["echo", "hi"], name="hello", priority=20, resources={"cpu": 2})
    assert isinstance(s, Session)
    assert (s.name, s.status, s.priority, s.resources["cpu"], s.command) == (
        "hello",
        "PENDING",
        20,
        2,
        ["echo", "hi"],
    )
    got = client.sessions.get(s.id[:8])
    assert got.id == s.id and got.created_at.tzinfo is not None
    assert [x.id for x in client.sessions.list(status=["pending"])] == [s.id]
    assert client.sessions.counts() == {"PENDING": 1}
    assert [a.id for a in client.sessions.attempts(s.id)] == [s.id]


def test_dump_gives_back_the_json_the_server_sent(client: Client) -> None:
    s = client.sessions.submit(command=["true"])
    raw = client._http.get(
        f"{client.url}/api/v1/sessions/{s.id}", headers={"Authorization": f"Bearer {client.target.key}"}
    )
    assert client.sessions.get(s.id).dump() == raw.json()


def test_raw_answers_the_json_as_sent_and_refuses_as_the_typed_calls(client: Client) -> None:
    s = client.sessions.submit(command=["true"], name="as-sent")
    assert client.raw.sessions.get(s.id) == client.sessions.get(s.id).dump()
    listed = client.raw.sessions.list()
    assert isinstance(listed, list) and listed[0]["name"] == "as-sent" and listed[0]["id"] == s.id
    with pytest.raises(CorralError) as caught:
        client.raw.sessions.get("no-such-session")
    assert (caught.value.status, caught.value.code) == (404, "not_found")


def test_a_refusal_carries_the_api_error_body(client: Client) -> None:
    with pytest.raises(CorralError) as caught:
        client.sessions.submit(command=["true"], cluster_size=0)
    err = caught.value
    assert (err.status, err.code, err.field) == (422, "validation_error", "cluster_size"), repr(err)
    assert "cluster_size" in err.message and err.details["fields"] == ["cluster_size"]
    with pytest.raises(CorralError) as missing:
        client.sessions.get("no-such-session")
    assert (missing.value.status, missing.value.code) == (404, "not_found"), repr(missing.value)


def test_an_id_is_one_path_segment(client: Client) -> None:
    """`../users` is a session id that matches nothing, never the users route."""
    with pytest.raises(CorralError) as caught:
        client.sessions.get("../users")
    assert caught.value.status == 404


def test_what_json_cannot_hold_is_refused_before_sending(client: Client) -> None:
    with pytest.raises(InvalidRequest) as caught:
        client.sessions.submit(command=["true"], resources={"cpu": float("nan")})
    assert caught.value.status == 0 and "JSON" in caught.value.message
    assert client.sessions.list() == []  # nothing was sent


def test_a_wrong_key_is_a_401_and_never_shown(client: Client) -> None:
    bad = Client(client.url, "crl_wrong_key_abcdef", http=client._http)
    with pytest.raises(CorralError) as caught:
        bad.me()
    assert caught.value.status == 401
    assert "crl_wrong_key" not in str(caught.value) and "crl_wrong_key" not in repr(bad.target)


def test_no_key_anywhere_says_where_to_get_one(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv("CORRAL_API_KEY", raising=False)
    monkeypatch.setenv("CORRAL_CONFIG", str(tmp_path / "none.json"))
    with pytest.raises(NoApiKey) as caught:
        Client("http://127.0.0.1:1")
    assert "corral up" in caught.value.message and "CORRAL_API_KEY" in caught.value.message


def test_admin_resources(client: Client) -> None:
    made = client.users.create("ada", projects=["default"])
    assert made.name == "ada" and made.key.key.startswith("crl_") and "key=" not in repr(made.key)
    assert [k.id for k in client.users.keys("ada")] == [made.key.id]
    assert client.users.update("ada", role="admin").role == "admin"
    client.users.revoke_key("ada", made.key.id)
    assert client.users.keys("ada") == []
    assert client.projects.create("ml", priority_rules={"max": 50}).priority_rules == {"max": 50}
    assert "ml" in [p.name for p in client.projects.list()]
    doc = {"kind": "RetryPolicy", "metadata": {"name": "flaky"}, "spec": {"retry_limit": 2}}
    assert client.policies.apply(doc).metadata["name"] == "flaky"
    assert client.policies.get("flaky").dump()["apiVersion"] == "corral/v1"
    client.policies.delete("flaky")
    assert client.policies.list() == []
    assert client.groups.update("default", preemptible_priority=5).preemptible_priority == 5
    assert client.cluster.configure({"retry": {"enabled": False}})["retry"]["enabled"] is False
    assert [a.action for a in client.cluster.audit()][-1].startswith("config")
    assert client.me().role == "admin"


async def test_the_async_client_reads_the_same(aclient: AsyncClient) -> None:
    s = await aclient.sessions.submit(command=["true"], name="async")
    assert (await aclient.sessions.get(s.id)).name == "async"
    arr = await aclient.arrays.submit("0-2", command=["true"])
    assert arr.size == 3 and len((await aclient.arrays.get(arr.array_id)).session_ids) == 3
    with pytest.raises(CorralError) as caught:
        await aclient.sessions.cancel("nope")
    assert caught.value.status == 404
    events = await aclient.events.list()
    assert {e.session_id for e in events} >= {s.id}


def test_a_key_with_a_line_break_is_refused_without_showing_it() -> None:
    with pytest.raises(CorralError) as caught:
        Client("http://127.0.0.1:1", "crl_secret_part\nAPI key: x")
    assert caught.value.code == "invalid_api_key" and "crl_secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"command": ["echo", "\ud800"]}, "command.1"),
        ({"command": ["true"], "priority": 2**64}, "priority"),
        ({"command": ["true"], "env": {"A": "x\x00y"}}, "env.A"),
        ({"command": ["true"], "retry_policy": {"max_retries": "many"}}, "retry_policy.max_retries"),
    ],
)
def test_bad_values_come_back_as_a_refusal_naming_the_field(client: Client, fields: dict, field: str) -> None:
    with pytest.raises(CorralError) as caught:
        client.sessions.submit(**fields)
    assert caught.value.status == 422 and caught.value.field == field, repr(caught.value)
    assert client.sessions.list() == []
