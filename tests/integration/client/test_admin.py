"""The admin resources through the client on a real manager: agents, users and keys, projects,
policies, resource groups, cluster settings, audit, events."""

from __future__ import annotations

import uuid

import pytest

from corral.client import Client, CorralError


def test_agents_show_their_capacity(corral: Client) -> None:
    agents = {a.id: a for a in corral.agents.list()}
    assert {"agent-a", "agent-b"} <= set(agents)
    assert agents["agent-a"].status == "ALIVE" and agents["agent-a"].capacity["cpu"] == 2


def test_a_new_users_key_works_and_stops_when_revoked(corral: Client) -> None:
    name = "u" + uuid.uuid4().hex[:8]
    made = corral.users.create(name, projects=["default"])
    with Client(corral.url, made.key.key) as theirs:
        assert (theirs.me().name, theirs.me().projects) == (name, ["default"])
        with pytest.raises(CorralError) as refused:
            theirs.agents.list()
        assert refused.value.status == 403
        corral.users.revoke_key(name, made.key.id)
        with pytest.raises(CorralError) as revoked:
            theirs.me()
        assert revoked.value.status == 401
    assert corral.users.get(name).projects == ["default"]


def test_projects_policies_and_groups(corral: Client) -> None:
    project = "p" + uuid.uuid4().hex[:8]
    policy = "pol-" + uuid.uuid4().hex[:8]
    doc = {"kind": "RetryPolicy", "metadata": {"name": policy}, "spec": {"retry_limit": 1}}
    assert corral.policies.apply(doc).spec["retry_limit"] == 1
    assert corral.projects.create(project, retry_policies=[policy]).retry_policies == [policy]
    with pytest.raises(CorralError) as bound:
        corral.policies.delete(policy)
    assert bound.value.status == 409, bound.value
    assert corral.projects.update(project, retry_policies=[]).retry_policies == []
    corral.policies.delete(policy)
    before = corral.groups.get("default").grace_period
    try:
        assert corral.groups.update("default", grace_period=before + 1).grace_period == before + 1
    finally:
        corral.groups.update("default", grace_period=before)


def test_cluster_settings_are_audited(corral: Client) -> None:
    rate = corral.cluster.config()["retry"]["dispatch_rate"]
    corral.cluster.configure({"retry": {"dispatch_rate": 7.5}})
    try:
        assert corral.cluster.config()["retry"]["dispatch_rate"] == 7.5
        assert any(a.action.startswith("config") for a in corral.cluster.audit(limit=1000))
    finally:
        corral.cluster.configure({"retry": {"dispatch_rate": rate}})


def test_events_follow_a_session(corral: Client) -> None:
    s = corral.sessions.submit(command=["true"], resources={"cpu": 0.5})
    corral.wait(s.id, timeout=60)
    events = corral.events.list(session=s.id, limit=1000)
    assert events and all(e.session_id == s.id for e in events)
    assert "TERMINATED" in {e.to_status for e in events}
