"""The retry engine as a user and an operator meet it (DESIGN §5), on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import TERMINAL, Cluster, poll, scratch
from tests.support.tenants import add_user_in_own_project

FLAKY = 'echo attempt $CORRAL_ATTEMPT of $CORRAL_MAX_ATTEMPTS; [ "$CORRAL_ATTEMPT" -ge 3 ] || exit 75'


def attempts(c: Cluster, session_id: str) -> list[dict[str, Any]]:
    return list(c.http.get(f"/api/v1/sessions/{session_id}/attempts").json())


def settled_chain(c: Cluster, session_id: str, n: int, timeout: float = 90) -> list[dict[str, Any]]:
    """The chain once it has `n` attempts, the last ended and decided on."""

    def done() -> list[dict[str, Any]] | None:
        chain = attempts(c, session_id)
        last = chain[-1]
        if len(chain) == n and last["status"] in TERMINAL and last["retry_reason"] is not None:
            return chain
        assert len(chain) <= n, [(a["attempt"], a["status"], a["retry_reason"]) for a in chain]
        if len(chain) < n and last["status"] in TERMINAL and last["retry_state"] in ("failed", "exhausted"):
            raise AssertionError(f"the chain stopped at {len(chain)}: {last['retry_reason']}")
        return None

    return list(poll(done, timeout, f"{n} decided attempts of {session_id}"))


def metric(c: Cluster, name: str, **labels: str) -> float:
    """A counter's value on this manager (0 when it has not been touched)."""
    text = c.http.get("/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:{{(.*)}})? (\S+)$", line)
        if m and (not want or all(part in (m.group(1) or "") for part in want.split(","))):
            total += float(m.group(2))
    return total


def stamp(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def agents_of(chain: list[dict[str, Any]]) -> list[str]:
    return [a["kernels"][0]["agent"] for a in chain]


def test_a_flaky_command_comes_back_with_backoff(cluster: Cluster) -> None:
    succeeded = metric(cluster, "corral_session_retry_succeeded_total")
    name = "flaky-" + uuid.uuid4().hex[:6]
    done = cluster.corral(
        "run",
        "--name",
        name,
        "--max-retries",
        "3",
        "--retry-delay",
        "1",
        "--jitter",
        "none",
        "--",
        "sh",
        "-c",
        FLAKY,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["attempt 1 of 4", "attempt 2 of 4", "attempt 3 of 4"]
    assert "attempt 2 of 4 after kernel_nonzero_exit (exit 75), retrying in 1.0 s" in done.stderr
    assert "attempt 3 of 4 after kernel_nonzero_exit (exit 75), retrying in 1.0 s" in done.stderr

    first = next(s for s in cluster.http.get("/api/v1/sessions").json() if s["name"] == name)
    chain = settled_chain(cluster, first["id"], 3)
    assert [(a["attempt"], a["status"], a["cause"]) for a in chain] == [
        (1, "ERROR", "kernel_nonzero_exit"),
        (2, "ERROR", "kernel_nonzero_exit"),
        (3, "TERMINATED", None),
    ]
    assert [a["name"] for a in chain] == [name, f"{name}-retry-1", f"{name}-retry-2"]
    assert [a["retry_state"] for a in chain] == ["succeeded"] * 3
    for parent, child in itertools.pairwise(chain):
        assert parent["next_attempt_id"] == child["id"] and child["parent_session_id"] == parent["id"]
        assert child["root_session_id"] == first["id"] and child["retry_cause"] == "kernel_nonzero_exit"
        assert stamp(child["started_at"]) >= stamp(child["retry_after"]), "started before retry_after"
        assert stamp(child["retry_after"]) - stamp(child["created_at"]) == pytest.approx(1.0, abs=0.01)

    assert metric(cluster, "corral_session_retry_succeeded_total") == succeeded + 1
    info = cluster.corral("session", "info", first["id"])
    assert "attempt 1 of 4" in info.stdout and f"next attempt: {chain[1]['id']}" in info.stdout
    listed = cluster.corral("session", "attempts", first["id"])
    assert listed.returncode == 0 and all(a["id"] in listed.stdout for a in chain)


def test_jitter_is_deterministic_unless_asked_otherwise(cluster: Cluster) -> None:
    """The retry spec's default: the delay spread by sha1(root:n), so it is the same on every manager."""
    s = cluster.submit(command=["sh", "-c", "exit 3"], retry_policy={"max_retries": 1, "retry_delay": 1})
    assert (s["retry_policy"]["jitter"], s["retry_policy"]["jitter_ratio"]) == ("deterministic", 0.25)
    chain = settled_chain(cluster, s["id"], 2)
    h = int.from_bytes(hashlib.sha1(f"{s['id']}:1".encode()).digest()[:8], "big")
    delay = stamp(chain[1]["retry_after"]) - stamp(chain[1]["created_at"])
    assert delay == pytest.approx(1 + 0.25 * h / 2**64, abs=0.01)


def test_retries_are_exhausted_and_counted(cluster: Cluster) -> None:
    scheduled = metric(cluster, "corral_session_retry_scheduled_total", cause="kernel_nonzero_exit")
    exhausted = metric(cluster, "corral_session_retry_exhausted_total", cause="kernel_nonzero_exit")
    name = "doomed-" + uuid.uuid4().hex[:6]
    done = cluster.corral(
        "run", "--name", name, "--max-retries", "2", "--retry-delay", "0", "--", "sh", "-c", "exit 7"
    )
    assert done.returncode == 7, done.stderr
    assert "no more retries" in done.stderr
    first = next(s for s in cluster.http.get("/api/v1/sessions").json() if s["name"] == name)
    chain = settled_chain(cluster, first["id"], 3)
    assert [a["retry_state"] for a in chain] == ["exhausted"] * 3
    events = cluster.http.get(
        "/api/v1/events", params={"type": "session.retry_exhausted", "session": chain[-1]["id"]}
    )
    assert len(events.json()) == 1 and events.json()[0]["payload"]["cause"] == "kernel_nonzero_exit"
    scheduled_events = cluster.http.get("/api/v1/events", params={"type": "session.retry_scheduled"}).json()
    assert {e["session_id"] for e in scheduled_events} >= {chain[0]["id"], chain[1]["id"]}
    assert (
        metric(cluster, "corral_session_retry_scheduled_total", cause="kernel_nonzero_exit") == scheduled + 2
    )
    assert (
        metric(cluster, "corral_session_retry_exhausted_total", cause="kernel_nonzero_exit") == exhausted + 1
    )
    audit = cluster.http.get("/api/v1/audit", params={"action": "retry.auto", "limit": 1000}).json()
    mine = [a for a in audit if a["target"] in {chain[1]["id"], chain[2]["id"]}]
    assert [a["reason"] for a in mine] == [
        "auto, kernel_nonzero_exit, attempt 2 of 3",
        "auto, kernel_nonzero_exit, attempt 3 of 3",
    ]

    # A manual retry of the exhausted chain: attempt 4, marked manual, a fresh budget.
    retried = cluster.corral("session", "retry", first["id"], "-o", "json")
    assert retried.returncode == 0, retried.stderr
    manual = json.loads(retried.stdout)
    assert (manual["attempt"], manual["manual_retry"], manual["parent_session_id"]) == (
        4,
        True,
        chain[-1]["id"],
    )
    assert manual["max_attempts"] == 4 + 2  # the attempts so far, then its own budget
    settled_chain(cluster, first["id"], 6)  # the fresh budget: two more automatic retries
    assert any(a["action"] == "retry.manual" for a in cluster.http.get("/api/v1/audit").json())


def test_a_get_shows_the_whole_chain_from_any_attempt(cluster: Cluster) -> None:
    """A first attempt nothing followed is its own chain (read from it alone); once retried, by the
    engine or by hand, every attempt's GET and listing show the whole chain and where it stands."""
    lone = cluster.wait(cluster.submit(command=["true"])["id"])
    assert (lone["retry_chain"], lone["retry_state"]) == ([lone["id"]], "none")

    s = cluster.submit(command=["sh", "-c", "exit 3"], retry_policy={"max_retries": 1, "retry_delay": 0})
    first, second = settled_chain(cluster, s["id"], 2)
    ids = [first["id"], second["id"]]
    for sid in ids:
        got = cluster.session(sid)
        assert (got["retry_chain"], got["retry_state"]) == (ids, "exhausted"), got
    listed = {x["id"]: x for x in cluster.http.get("/api/v1/sessions", params={"limit": 1000}).json()}
    assert [listed[sid]["retry_chain"] for sid in ids] == [ids, ids]

    # By hand: the lone session becomes the first of two, and says so while the second runs.
    gate = f"/tmp/chain-{uuid.uuid4().hex[:8]}"
    plain = cluster.wait(cluster.submit(command=["sh", "-c", f"[ ! -e {gate} ] || sleep 30"])["id"])
    Path(gate).touch()
    # It succeeded: running it again is refused unless asked for with force.
    refused = cluster.http.post(f"/api/v1/sessions/{plain['id']}/retry")
    assert refused.status_code == 409 and "--force" in refused.json()["error"]["message"], refused.text
    cli = cluster.corral("session", "retry", plain["id"])
    assert cli.returncode != 0 and "--force" in cli.stderr
    resp = cluster.http.post(f"/api/v1/sessions/{plain['id']}/retry", params={"force": True})
    assert resp.status_code == 201, resp.text
    child = resp.json()
    try:
        assert child["retry_chain"] == [plain["id"], child["id"]]
        root = cluster.session(plain["id"])
        assert root["retry_chain"] == [plain["id"], child["id"]]
        assert root["retry_state"] in ("scheduled", "running"), root
    finally:
        cluster.http.post(f"/api/v1/sessions/{child['id']}/cancel")
        Path(gate).unlink()
    cluster.wait(child["id"])


def test_a_live_chain_cannot_be_retried_by_hand(cluster: Cluster) -> None:
    s = cluster.submit(command=["sleep", "30"], resources={"cpu": 0.1})
    try:
        resp = cluster.http.post(f"/api/v1/sessions/{s['id']}/retry")
        assert resp.status_code == 409, resp.text
    finally:
        cluster.http.post(f"/api/v1/sessions/{s['id']}/cancel")
    cluster.wait(s["id"])


POLICY = """
apiVersion: corral/v1
kind: RetryPolicy
metadata:
  name: {name}
spec:
  default_action: fail
  rules:
    - action: Retry
      on_conditions: [OOMKilled]
      retry_limit: 1
    - action: retry
      on_exit_codes: {{operator: In, values: [137, 75]}}
      retry_limit: 2
    - action: fail
      on_exit_codes: {{operator: In, values: [1]}}
"""


def test_a_named_policy_decides_rule_by_rule(cluster: Cluster, tmp_path: Path) -> None:
    policy = "acceptance-" + uuid.uuid4().hex[:6]
    project = "proj-" + policy
    (tmp_path / "p.yaml").write_text(POLICY.format(name=policy))
    applied = cluster.corral("policy", "apply", "-f", str(tmp_path / "p.yaml"))
    assert applied.returncode == 0, applied.stderr
    assert cluster.corral("project", "create", project, "--policy", policy).returncode == 0
    assert policy in cluster.corral("policy", "list").stdout

    s75 = cluster.submit(command=["sh", "-c", "exit 75"], project=project)
    chain = settled_chain(cluster, s75["id"], 3)  # the project's policy applies to a session naming none
    assert [a["retry_reason"].split(";")[0] for a in chain] == [
        f"policy {policy} rule 2 retries (1 of 2), retrying at once",
        f"policy {policy} rule 2 retries (2 of 2), retrying at once",
        f"policy {policy} rule 2: its 2 retries are used",
    ]
    s1 = cluster.submit(command=["sh", "-c", "exit 1"], project=project, retry_policy={"max_retries": 5})
    [only] = settled_chain(cluster, s1["id"], 1)
    assert only["retry_reason"] == f"policy {policy} rule 3 says fail" and only["retry_state"] == "failed"
    s3 = cluster.submit(command=["sh", "-c", "exit 3"], project=project)
    [only] = settled_chain(cluster, s3["id"], 1)
    assert only["retry_reason"] == "no retries asked for (max_retries 0)"

    # user_cancelled never retries, whatever a policy says.
    s = cluster.submit(command=["sleep", "60"], project=project, retry_policy={"max_retries": 3})
    cluster.wait(s["id"], {"RUNNING"})
    cluster.http.post(f"/api/v1/sessions/{s['id']}/cancel")
    [only] = settled_chain(cluster, s["id"], 1)
    assert only["cause"] == "user_cancelled" and only["retry_reason"] == "user_cancelled is never retried"

    # A real cgroup OOM kill is retried by the OOM rule, once (its own limit).
    hog = "python3 -c 'x = bytearray(400 << 20); print(len(x))'"
    s = cluster.submit(command=["sh", "-c", hog], project=project, resources={"cpu": 1, "mem": "64M"})
    chain = settled_chain(cluster, s["id"], 2)
    assert [a["cause"] for a in chain] == ["oom_killed", "oom_killed"]
    assert chain[0]["retry_reason"].startswith(f"policy {policy} rule 1 retries (1 of 1)")
    assert chain[1]["retry_reason"] == f"policy {policy} rule 1: its 1 retries are used"

    # A bound policy cannot be deleted; unbound, it can.
    assert cluster.http.delete(f"/api/v1/retry-policies/{policy}").status_code == 409
    assert cluster.corral("project", "update", project, "--no-policies").returncode == 0
    assert cluster.corral("policy", "delete", policy).returncode == 0
    assert cluster.http.get(f"/api/v1/retry-policies/{policy}").status_code == 404


def policy_yaml(rules: str) -> str:
    """A RetryPolicy document with these rules (YAML under `rules:`), its name left as {name}."""
    header = "apiVersion: corral/v1\nkind: RetryPolicy\nmetadata:\n  name: {name}\nspec:\n  rules:\n"
    return header + rules


ROLE_POLICY = policy_yaml("""    - action: fail
      kernel_role: sub
      on_exit_codes: {{operator: In, values: [3]}}
""")


def test_a_rule_for_a_role_sees_that_roles_kernels_not_only_the_root_cause(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Rank 0 (main) exits 5 and rank 1 (sub) exits 3, both on their own (they wait for each other,
    so neither is stopped first); main is the root cause (error_strategy single). A rule for role sub
    on exit 3 decides: without roles it would see only exit 5."""
    policy = "roles-" + uuid.uuid4().hex[:6]
    (tmp_path / "p.yaml").write_text(ROLE_POLICY.format(name=policy))
    assert cluster.corral("policy", "apply", "-f", str(tmp_path / "p.yaml")).returncode == 0
    gate = tmp_path / "gate"
    gate.mkdir(mode=0o777)
    gate.chmod(0o777)
    gang = (
        f"touch {gate}/$CORRAL_CLUSTER_RANK;"
        f" while [ ! -e {gate}/0 ] || [ ! -e {gate}/1 ]; do sleep 0.01; done;"
        ' [ "$CORRAL_CLUSTER_RANK" = 0 ] && exit 5; exit 3'
    )
    s = cluster.submit(
        command=["sh", "-c", gang],
        cluster_size=2,
        error_strategy="single",
        retry_policies=[policy],
        retry_policy={"max_retries": 2, "retry_delay": 0},
    )
    [only] = settled_chain(cluster, s["id"], 1)
    kernels = {k["role"]: k for k in only["kernels"]}
    assert (kernels["main"]["exit_code"], kernels["sub"]["exit_code"]) == (5, 3), only
    assert only["root_cause"]["kernel_id"] == kernels["main"]["id"]
    assert only["retry_reason"] == f"policy {policy} rule 1 says fail"


def test_anti_affinity_avoids_only_the_last_node_and_the_checkpoint_follows(cluster: Cluster) -> None:
    count = (
        'echo $CORRAL_ATTEMPT >> "$CORRAL_CHECKPOINT_DIR/seen"; wc -l < "$CORRAL_CHECKPOINT_DIR/seen"; exit 3'
    )
    policy = {"max_retries": 3, "retry_delay": 0}
    away = cluster.submit(command=["sh", "-c", count], retry_policy={**policy, "anti_affinity": "node"})
    chain = settled_chain(cluster, away["id"], 4)
    assert agents_of(chain) == ["agent-a", "agent-b", "agent-a", "agent-b"]
    assert cluster.output(chain[-1]["id"]).strip() == "4", "every attempt saw one checkpoint directory"

    stay = cluster.submit(command=["sh", "-c", "exit 3"], retry_policy=policy)
    assert agents_of(settled_chain(cluster, stay["id"], 4)) == ["agent-a"] * 4


def test_anti_affinity_is_soft_with_one_agent(cluster: Cluster) -> None:
    group = "solo-" + uuid.uuid4().hex[:6]
    cluster.start_agent(group + "-agent", cpu=1, resource_group=group)
    s = cluster.submit(
        command=["sh", "-c", "exit 3"],
        resource_group=group,
        retry_policy={"max_retries": 2, "retry_delay": 0, "anti_affinity": "node"},
    )
    chain = settled_chain(cluster, s["id"], 3)
    assert agents_of(chain) == [group + "-agent"] * 3
    said = [h["message"] for h in cluster.history(chain[1]["id"]) if h["handler"] == "ScheduleNewSessions"]
    assert any(f"no agent but {group}-agent had room" in m for m in said), said


def test_storm_guard_delays_and_never_drops(cluster: Cluster) -> None:
    assert (
        cluster.http.patch("/api/v1/cluster-config", json={"retry": {"dispatch_rate": 5}}).status_code == 200
    )
    try:
        body = {
            "command": ["sh", "-c", "exit 3"],
            "resources": {"cpu": 0.1},
            "retry_policy": {"max_retries": 1, "retry_delay": 0},
        }
        firsts = [cluster.submit(**body)["id"] for _ in range(20)]
        chains = [settled_chain(cluster, sid, 2, timeout=120) for sid in firsts]
        # Each retry is dispatched at its slot (retry_after; the first one at once, when made).
        slots = sorted(stamp(child["retry_after"] or child["created_at"]) for _, child in chains)
        assert len(slots) == 20  # every failure got its retry: delayed, none dropped
        spread = slots[-1] - slots[0]
        assert spread >= 3.5, f"20 retries at 5/s dispatched over {spread:.2f}s"
        for parent, child in chains:  # each made at once, and started no earlier than its slot
            assert stamp(child["created_at"]) - stamp(parent["terminated_at"]) < 5
            if child["retry_after"]:
                assert stamp(child["started_at"]) >= stamp(child["retry_after"])
        # A held retry says when it starts and why then, never "at once".
        reasons = [parent["retry_reason"] for parent, child in chains if child["retry_after"]]
        assert reasons and all("(held by the cluster's dispatch_rate of 5/s)" in r for r in reasons), reasons
        assert not any("at once" in r for r in reasons), reasons
    finally:
        assert (
            cluster.http.patch("/api/v1/cluster-config", json={"retry": {"dispatch_rate": None}}).status_code
            == 200
        )


def test_kill_switch_at_runtime(cluster: Cluster) -> None:
    failing = {"command": ["sh", "-c", "exit 3"], "retry_policy": {"max_retries": 2, "retry_delay": 0}}
    assert cluster.corral("config", "set", "retry.global_max_retries", "0").returncode == 0
    try:
        [only] = settled_chain(cluster, cluster.submit(**failing)["id"], 1)
        assert only["retry_reason"] == "retries are disabled on this cluster"
        assert cluster.corral("config", "get", "retry.global_max_retries").stdout.strip() == "0"
    finally:
        assert cluster.corral("config", "set", "retry.global_max_retries", "20").returncode == 0
    assert len(settled_chain(cluster, cluster.submit(**failing)["id"], 3)) == 3
    # The global cap counts the chain's retries, whatever policy spends them.
    assert cluster.corral("config", "set", "retry.global_max_retries", "1").returncode == 0
    try:
        chain = settled_chain(cluster, cluster.submit(**failing)["id"], 2)
        assert chain[-1]["retry_reason"] == (
            "not retried: the chain used all 1 retries the cluster allows (global_max_retries)"
        )
    finally:
        assert cluster.corral("config", "set", "retry.global_max_retries", "20").returncode == 0
    changes = [
        a["target"]
        for a in cluster.http.get("/api/v1/audit", params={"action": "config.set", "limit": 1000}).json()
    ]
    assert changes.count("retry.global_max_retries") >= 4


def test_only_batch_sessions_are_submitted_and_quiet_sessions_emit_no_events(cluster: Cluster) -> None:
    # Non-batch sessions are not retried (tests/unit/domain/test_retry.py); until deployments make
    # inference sessions themselves, a request may not submit one, nor an interactive one.
    for kind in ("interactive", "inference"):
        refused = cluster.http.post(
            "/api/v1/sessions", json={"command": ["true"], "type": kind, "retry_policy": {"max_retries": 2}}
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["details"]["field"] == "type"
        assert kind in refused.json()["error"]["message"]

    quiet = {"max_retries": 1, "retry_delay": 0, "emit_retry_events": False}
    s = cluster.submit(command=["sh", "-c", "exit 3"], retry_policy=quiet)
    chain = settled_chain(cluster, s["id"], 2)
    for a in chain:
        kinds = {e["type"] for e in cluster.http.get("/api/v1/events", params={"session": a["id"]}).json()}
        assert not {k for k in kinds if k.startswith("session.retry_")}, kinds


def test_defaults_merge_session_over_project_over_cluster(cluster: Cluster) -> None:
    project = "defaults-" + uuid.uuid4().hex[:6]
    cluster.http.patch(
        "/api/v1/cluster-config", json={"retry": {"defaults": {"max_retries": 1, "retry_delay": 7}}}
    )
    try:
        made = cluster.http.post(
            "/api/v1/projects",
            json={"name": project, "retry_defaults": {"retry_delay": 0, "jitter": "none"}},
        )
        assert made.status_code == 201, made.text
        s = cluster.submit(command=["true"], project=project, retry_policy={"max_retries": 4})
        assert s["retry_policy"]["max_retries"] == 4  # session
        assert s["retry_policy"]["retry_delay"] == 0 and s["retry_policy"]["jitter"] == "none"  # project
        plain = cluster.submit(command=["true"])
        assert (plain["retry_policy"]["max_retries"], plain["retry_policy"]["retry_delay"]) == (
            1,
            7,
        )  # cluster
        # A change merges into the defaults (as `corral config set retry.defaults.jitter` does).
        assert cluster.corral("config", "set", "retry.defaults.jitter", "random").returncode == 0
        merged = cluster.http.get("/api/v1/cluster-config").json()["retry"]["defaults"]
        assert merged == {"max_retries": 1, "retry_delay": 7, "jitter": "random"}
        # An empty object changes nothing: the CLI prints what the cluster uses after the change.
        same = cluster.corral("config", "set", "retry.defaults", "{}")
        assert same.returncode == 0 and json.loads(same.stdout.split(" = ", 1)[1]) == merged, same.stdout
        assert "merges" in same.stderr
    finally:
        cluster.http.patch("/api/v1/cluster-config", json={"retry": {"defaults": None}})
    assert cluster.http.get("/api/v1/cluster-config").json()["retry"]["defaults"] == {}
    assert cluster.submit(command=["true"])["retry_policy"] is None
    # No cause listed means no cause retried (not the default set).
    none = cluster.submit(
        command=["sh", "-c", "exit 3"], retry_policy={"max_retries": 2, "eligible_causes": []}
    )
    assert none["retry_policy"]["eligible_causes"] == []
    [only] = settled_chain(cluster, none["id"], 1)
    assert only["retry_reason"] == "kernel_nonzero_exit is not in the policy's retry causes"


def test_configuration_routes_are_admin_only(cluster: Cluster) -> None:
    name = "eve-" + uuid.uuid4().hex[:6]
    key = add_user_in_own_project(cluster.database_url, name, "proj-" + name)
    eve = httpx.Client(base_url=cluster.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    doc = {"metadata": {"name": "eve-policy"}, "spec": {"rules": []}}
    calls = [
        ("GET", "/api/v1/cluster-config", None),
        ("PATCH", "/api/v1/cluster-config", {"retry": {"enabled": False}}),
        ("GET", "/api/v1/retry-policies", None),
        ("POST", "/api/v1/retry-policies", doc),
        ("DELETE", "/api/v1/retry-policies/anything", None),
        ("GET", "/api/v1/projects", None),
        ("POST", "/api/v1/projects", {"name": "eve-project"}),
        ("GET", "/api/v1/audit", None),
        ("GET", "/metrics", None),
    ]
    for method, path, body in calls:
        resp = eve.request(method, path, json=body)
        assert resp.status_code == 403, (method, path, resp.text)
    assert cluster.http.get("/api/v1/cluster-config").json()["retry"]["enabled"] is True
    # Events are scoped: eve sees none of the admin's sessions' events.
    assert all(e["session_id"] for e in eve.get("/api/v1/events", params={"limit": 1000}).json()) is True
    assert eve.get("/api/v1/events", params={"limit": 1000}).json() == []
    eve.close()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"retry_policy": {"eligible_causes": ["nope"]}}, "retry_policy.eligible_causes.0"),
        ({"retry_policy": {"eligible_causes": ["user_cancelled"]}}, "retry_policy.eligible_causes"),
        ({"retry_policy": {"retry_delay": -1}}, "retry_policy.retry_delay"),
        ({"retry_policy": {"retry_delay": "-5s"}}, "retry_policy.retry_delay"),
        ({"retry_policy": {"max_retry_delay": 90000}}, "retry_policy.max_retry_delay"),
        ({"retry_policy": {"max_retry_delay": "25h"}}, "retry_policy.max_retry_delay"),
        ({"retry_policy": {"backoff": "linear"}}, "retry_policy.backoff"),
        ({"retry_policies": ["no-such-policy"]}, "retry_policies.0"),
        ({"creation_id": "nightly:retry:1"}, "creation_id"),
    ],
)
def test_bad_retry_requests_are_refused_naming_the_field(
    cluster: Cluster, body: dict[str, Any], field: str
) -> None:
    before = sum(cluster.http.get("/api/v1/sessions/counts").json().values())
    resp = cluster.http.post("/api/v1/sessions", json={"command": ["true"], **body})
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["details"]["field"] == field, resp.text
    assert sum(cluster.http.get("/api/v1/sessions/counts").json().values()) == before


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            {"rules": [{"action": "retry", "on_termination_message": {"pattern": "(("}}]},
            "spec.rules.0.on_termination_message.pattern",
        ),
        ({"rules": [{"action": "retry", "on_foo": [1]}]}, "spec.rules.0.on_foo"),
        ({"rules": [{"action": "maybe"}]}, "spec.rules.0.action"),
        ({"rules": [{"action": "retry", "on_conditions": ["Sunburnt"]}]}, "spec.rules.0.on_conditions.0"),
        (
            {"rules": [{"action": "retry", "on_exit_codes": {"operator": "Near", "values": [1]}}]},
            "spec.rules.0.on_exit_codes.operator",
        ),
        ({"backoff": {"initial_delay": -1}}, "spec.backoff.initial_delay"),
        ({"retry_limit": -1}, "spec.retry_limit"),
    ],
)
def test_bad_policies_are_refused_and_nothing_is_stored(
    cluster: Cluster, spec: dict[str, Any], field: str
) -> None:
    before = cluster.http.get("/api/v1/retry-policies").json()
    resp = cluster.http.post("/api/v1/retry-policies", json={"metadata": {"name": "bad-one"}, "spec": spec})
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["details"]["field"] == field, resp.text
    assert cluster.http.get("/api/v1/retry-policies").json() == before


def test_bad_cluster_config_is_refused_naming_the_rule(cluster: Cluster) -> None:
    before = cluster.http.get("/api/v1/cluster-config").json()
    bad = {
        "failure_categories": [
            {"name": "ok", "on_log_tail": {"pattern": "x"}},
            {"name": "bad", "on_log_tail": {"pattern": "[z-a]"}},
        ]
    }
    resp = cluster.http.patch("/api/v1/cluster-config", json=bad)
    assert (
        resp.status_code == 422
        and resp.json()["error"]["details"]["field"] == "failure_categories.1.on_log_tail.pattern"
    )
    for body in (
        {"retry": {"global_max_retries": -1}},
        {"retry": {"dispatch_rate": 0}},
        {"retry": {"nope": 1}},
    ):
        assert cluster.http.patch("/api/v1/cluster-config", json=body).status_code == 422
    assert cluster.http.get("/api/v1/cluster-config").json() == before


MESSAGES = {
    "rules": [
        {"action": "retry", "on_termination_message": {"pattern": "TRANSIENT"}, "retry_limit": 1},
        {"action": "retry", "on_failure_category": ["cuda_oom"], "retry_limit": 1},
    ]
}


def test_termination_log_categories_and_error_records_reach_the_decision(cluster: Cluster) -> None:
    policy = "messages-" + uuid.uuid4().hex[:6]
    resp = cluster.http.post("/api/v1/retry-policies", json={"metadata": {"name": policy}, "spec": MESSAGES})
    assert resp.status_code == 201, resp.text

    def chain_of(script: str, **extra: Any) -> list[dict[str, Any]]:
        s = cluster.submit(command=["sh", "-c", script], **extra)
        first = settled_chain(cluster, s["id"], 2)
        return first

    named = {"retry_policies": [policy]}
    by_log = chain_of('echo "step 3: TRANSIENT network error" > "$CORRAL_TERMINATION_LOG"; exit 2', **named)
    assert by_log[0]["retry_reason"].startswith(f"policy {policy} rule 1 retries")
    assert by_log[0]["kernels"][0]["termination_message"] == "step 3: TRANSIENT network error"
    by_tail = chain_of('echo "RuntimeError: CUDA out of memory. Tried to allocate" >&2; exit 1', **named)
    assert by_tail[0]["retry_reason"].startswith(f"policy {policy} rule 2 retries")
    # The root-cause record's own word: recoverable, so retried although its cause is not listed.
    record = '{"schema": "corral.error/v1", "message": "flaky disk", "recoverable": true}'
    inline = {"max_retries": 1, "retry_delay": 0, "eligible_causes": ["oom_killed"]}
    by_record = chain_of(f"echo '{record}' > \"$CORRAL_ERROR_FILE\"; exit 9", retry_policy=inline)
    assert by_record[0]["retry_reason"].startswith("recoverable error: retry 1 of 1")


def test_a_slow_pattern_never_holds_the_manager(cluster: Cluster) -> None:
    catastrophic = [{"name": "slow", "on_log_tail": {"pattern": "(x+x+)+y"}}]
    before = cluster.http.get("/api/v1/cluster-config").json()["failure_categories"]
    assert (
        cluster.http.patch("/api/v1/cluster-config", json={"failure_categories": catastrophic}).status_code
        == 200
    )
    try:
        s = cluster.submit(command=["sh", "-c", "printf 'x%.0s' $(seq 60) >&2; exit 1"])
        [only] = settled_chain(cluster, s["id"], 1, timeout=30)
        assert only["kernels"][0]["detail"]["log_tail"] == "x" * 60
        # Backtracking on 60 x's would take years: the match is cut short and counts as none.
        assert httpx.get(cluster.url + "/healthz", timeout=2).status_code == 200
    finally:
        cluster.http.patch("/api/v1/cluster-config", json={"failure_categories": before})


def test_a_deleted_policy_is_named_in_the_decision(cluster: Cluster) -> None:
    policy = "fleeting-" + uuid.uuid4().hex[:6]
    doc = {"metadata": {"name": policy}, "spec": {"rules": [{"action": "retry"}]}}
    assert cluster.http.post("/api/v1/retry-policies", json=doc).status_code == 201
    gate = f"/tmp/{policy}.go"
    s = cluster.submit(
        command=["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done; exit 3"], retry_policies=[policy]
    )
    cluster.wait(s["id"], {"RUNNING"})
    assert cluster.http.delete(f"/api/v1/retry-policies/{policy}").status_code == 204
    Path(gate).touch()
    try:
        [only] = settled_chain(cluster, s["id"], 1)
    finally:
        Path(gate).unlink()
    assert only["retry_reason"].endswith(f"(named policies not applied: {policy} (deleted))"), only[
        "retry_reason"
    ]


@pytest.mark.started_anyhow
def test_ctrl_c_stops_the_chain(cluster: Cluster) -> None:
    name = "interrupted-" + uuid.uuid4().hex[:6]
    env = {**cluster.env, "CORRAL_URL": cluster.url, "CORRAL_API_KEY": cluster.key}
    args = ["run", "--name", name, "--max-retries", "3", "--retry-delay", "60", "--", "sh", "-c", "exit 3"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", *args], env=env, stderr=subprocess.PIPE, text=True
    )
    try:

        def waiting_child() -> dict[str, Any] | None:
            found = [s for s in cluster.http.get("/api/v1/sessions").json() if s["name"] == f"{name}-retry-1"]
            return found[0] if found else None

        child = poll(waiting_child, 60, "the first retry to be scheduled")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    ended = cluster.wait(child["id"], timeout=30)
    assert (ended["status"], ended["cause"]) == ("CANCELLED", "user_cancelled")
    assert len(attempts(cluster, child["id"])) == 2


@pytest.mark.started_anyhow
def test_events_follow_prints_retries_as_they_happen(cluster: Cluster) -> None:
    env = {**cluster.env, "CORRAL_URL": cluster.url, "CORRAL_API_KEY": cluster.key}
    last = cluster.http.get("/api/v1/events", params={"newest": True, "limit": 1}).json()
    after = last[0]["position"] if last else "0"
    args = ["events", "--follow", "-t", "session.retry_scheduled", "--after", after]
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", *args], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        s = cluster.submit(command=["sh", "-c", "exit 3"], retry_policy={"max_retries": 1, "retry_delay": 0})
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the follow prints (the test timeout bounds it)
        assert "session.retry_scheduled" in line and s["id"] in line, line
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # closes its pipe


def test_an_events_wait_with_nothing_new_answers_empty_when_it_ends(cluster: Cluster) -> None:
    """The long poll's other half (the fuzz keeps its waits short): nothing new, [] after the wait."""
    started = time.monotonic()
    # A project nobody has: the wait cannot be cut short by another test's sessions.
    resp = cluster.http.get("/api/v1/events", params={"wait": 1.5, "project": f"none-{uuid.uuid4().hex}"})
    took = time.monotonic() - started
    assert resp.status_code == 200 and resp.json() == []
    assert 1.5 <= took < 10, took


DEFAULT_POLICY = policy_yaml("""    - action: retry
      on_exit_codes: {{operator: In, values: [3]}}
      retry_limit: 1
""")


def test_the_clusters_default_policy_and_backoff_apply_when_nobody_names_one(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Armada's cluster defaults: retry.default_policy for a session whose project and itself name
    no policy, and retry.default_backoff for the policies and rules that give no backoff."""
    config = "/api/v1/cluster-config"
    for bad, field in (
        ({"default_policy": "no-such-policy"}, "retry.default_policy"),
        ({"default_backoff": {"multiplier": 0.5}}, "retry.default_backoff.multiplier"),
        ({"default_backoff": {"initial_delay": -1}}, "retry.default_backoff.initial_delay"),
        ({"default_backoff": {"bogus": 1}}, "retry.default_backoff.bogus"),
    ):
        refused = cluster.http.patch(config, json={"retry": bad})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["details"]["field"] == field, refused.text
    policy = "cluster-default-" + uuid.uuid4().hex[:6]
    (tmp_path / "p.yaml").write_text(DEFAULT_POLICY.format(name=policy))
    assert cluster.corral("policy", "apply", "-f", str(tmp_path / "p.yaml")).returncode == 0
    project = "plain-" + policy
    assert cluster.corral("project", "create", project).returncode == 0
    assert cluster.corral("config", "set", "retry.default_policy", policy).returncode == 0
    set_ = cluster.corral("config", "set", "retry.default_backoff", '{"initial_delay": 1.5}')
    assert set_.returncode == 0 and '"initial_delay": 1.5' in set_.stdout, set_.stdout
    try:
        s = cluster.submit(command=["sh", "-c", "exit 3"], project=project)
        chain = settled_chain(cluster, s["id"], 2)
        assert chain[0]["retry_reason"] == f"policy {policy} rule 1 retries (1 of 1), retrying in 1.5 s"
        assert stamp(chain[1]["retry_after"]) - stamp(chain[1]["created_at"]) == pytest.approx(1.5, abs=0.01)
        in_use = cluster.http.delete(f"/api/v1/retry-policies/{policy}")
        assert in_use.status_code == 409 and "retry.default_policy" in in_use.text
    finally:
        cluster.http.patch(config, json={"retry": {"default_policy": None, "default_backoff": None}})
    after = cluster.http.get(config).json()["retry"]
    assert (after["default_policy"], after["default_backoff"]) == (None, {})
    assert cluster.http.delete(f"/api/v1/retry-policies/{policy}").status_code == 204


def test_a_retry_at_once_takes_its_parents_slot_before_later_sessions(
    own_cluster: Callable[..., Cluster],
) -> None:
    """Armada: requeued jobs go before new jobs at the same priority. One CPU, a failing session
    with an immediate retry, and a session submitted after it waiting for that CPU: the freed CPU
    goes to the retry, not to the later session (which got it in the same cycle before)."""
    c = own_cluster()
    c.start_agent("only", cpu=1)
    for _ in range(3):
        gate = Path(scratch(c.workdir / f"gate-{uuid.uuid4().hex[:6]}"))
        failing = c.submit(
            command=["sh", "-c", f"while [ ! -e {gate}/go ]; do sleep 0.02; done; exit 3"],
            retry_policy={"max_retries": 1, "retry_delay": 0, "jitter": "none"},
        )
        c.wait(failing["id"], {"RUNNING"})
        later = c.submit(command=["sh", "-c", "sleep 0.5"])
        skipped = lambda sid=later["id"]: any(h["result"] == "SKIPPED" for h in c.history(sid))  # noqa: E731
        poll(skipped, 20, "the later session to wait")
        (gate / "go").touch()
        chain = settled_chain(c, failing["id"], 2)
        waited = c.wait(later["id"])
        assert stamp(chain[1]["started_at"]) < stamp(waited["started_at"]), (chain[1], waited)
