"""`corral deploy …` through the real CLI against a real manager, with real replicas: a file
created, listed, scaled, rolled out and back, deleted; bad files and names exit non-zero saying
what is wrong."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.cluster import Cluster, poll
from tests.support.deployments import get, ready, replica_session


def _file(tmp_path: Path, name: str, replicas: int, env: dict[str, str] | None = None) -> Path:
    doc = {
        "apiVersion": "corral/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "session": replica_session(env), "health": {"interval": "0.5s"}},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_deployment_file_goes_through_its_life(cluster: Cluster, tmp_path: Path) -> None:
    made = cluster.corral("deploy", "create", "-f", str(_file(tmp_path, "cli-echo", 2)))
    assert made.returncode == 0, made.stderr
    assert "cli-echo" in made.stdout and "reachable at /serve/cli-echo/: no" in made.stdout
    ready(cluster.http, "cli-echo", 2)
    shown = cluster.corral("deploy", "get", "cli-echo")
    assert "reachable at /serve/cli-echo/: yes" in shown.stdout and shown.stdout.count("HEALTHY") == 2
    listed = cluster.corral_json("deploy", "list")
    assert [(d["name"], d["ready"], d["replicas"]) for d in listed if d["name"] == "cli-echo"] == [
        ("cli-echo", 2, 2)
    ]
    assert cluster.corral_json("deploy", "scale", "cli-echo", "1")["replicas"] == 1
    ready(cluster.http, "cli-echo", 1)
    found = cluster.corral_json("deploy", "routes", "cli-echo")  # ended ones are listed too
    assert sum(r["in_traffic"] for r in found) == 1 and "TERMINATED" in {r["status"] for r in found}

    applied = cluster.corral_json("deploy", "apply", "-f", str(_file(tmp_path, "cli-echo", 1, {"V": "2"})))
    assert applied["revision"] == 2
    done = cluster.corral("deploy", "rollout", "status", "cli-echo", "--wait", "60")
    assert done.returncode == 0 and "revision 2: 1/1 ready, complete." in done.stdout.splitlines()[-1]
    assert cluster.corral_json("deploy", "rollout", "undo", "cli-echo")["revision"] == 3
    d = ready(cluster.http, "cli-echo", 1)
    assert d["session"]["env"] == {}
    history = cluster.corral("deploy", "history", "cli-echo")
    assert "ScalingDeployment" in history.stdout and "DrainRoute" in history.stdout

    gone = cluster.corral("deploy", "delete", "cli-echo")
    assert gone.returncode == 0
    poll(lambda: get(cluster.http, "cli-echo")["status"] == "DESTROYED", 60, "cli-echo DESTROYED")


def test_bad_input_exits_non_zero_saying_what_is_wrong(cluster: Cluster, tmp_path: Path) -> None:
    wrong_kind = tmp_path / "kind.yaml"
    wrong_kind.write_text("apiVersion: corral/v1\nkind: RetryPolicy\nmetadata: {name: x}\nspec: {}\n")
    no_name = tmp_path / "name.yaml"
    no_name.write_text("apiVersion: corral/v1\nkind: Deployment\nspec: {replicas: 1}\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: [\n")
    bad_replicas = _file(tmp_path, "cli-bad", 1)
    bad_replicas.write_text(bad_replicas.read_text().replace("replicas: 1", "replicas: 1000"))
    for argv, words in [
        (["create", "-f", str(wrong_kind)], "kind: Deployment"),
        (["create", "-f", str(no_name)], "metadata.name"),
        (["create", "-f", str(broken)], "cannot read"),
        (["create", "-f", str(tmp_path / "missing.yaml")], "cannot read"),
        (["create", "-f", str(bad_replicas)], "replicas"),
        (["get", "no-such-deployment"], "no deployment"),
        (["scale", "no-such-deployment", "-1"], "-1"),
        (["rollout", "undo", "no-such-deployment"], "no deployment"),
    ]:
        done = cluster.corral("deploy", *argv)
        assert done.returncode != 0 and words in (done.stderr + done.stdout), (argv, done.stderr)
        assert "Traceback" not in done.stderr
    assert all(d["name"] != "cli-bad" for d in cluster.corral_json("deploy", "list"))
