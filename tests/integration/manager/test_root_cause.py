"""Distributed root cause as a user meets it (DESIGN §4), on SQLite and PostgreSQL: per-worker error
records, the three strategies, the worker helper deciding retries, and files that must break nothing."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.manager.test_retry import settled_chain
from tests.support.cluster import Cluster, scratch

# Three workers, ordered by marker files so their records' times are certain: rank 2 writes a
# side-effect record first, then rank 0 writes one, then rank 1 raises the real error.  Ranks 0 and
# 2 fail once rank 1 has (as a peer would when its all_reduce loses a worker).
GANG = r"""
import os, pathlib, sys, time
from corral_worker import record, write_record
rank, d = int(os.environ["RANK"]), pathlib.Path(sys.argv[1])
def wait(name):
    deadline = time.monotonic() + 30
    while not (d / name).exists():
        if time.monotonic() > deadline:
            sys.exit("timed out waiting for " + name)
        time.sleep(0.01)
if rank == 2:
    write_record(ConnectionResetError("Connection reset by peer"))
    (d / "m2").touch()
elif rank == 0:
    wait("m2")
    write_record(RuntimeError("[gloo] Connection closed by peer [127.0.0.1]:4242"))
    (d / "m0").touch()
else:
    wait("m0")
    try:
        with record():
            raise ValueError("bad batch")
    finally:
        (d / "m1").touch()  # only once its record is written
wait("m1")
time.sleep(0.5)  # rank 1 has surely exited by itself: nobody stopped it before it spoke
sys.exit(1)
"""


def gang(cluster: Cluster, tmp_path: Path, strategy: str | None) -> dict[str, Any]:
    marks = tmp_path / uuid.uuid4().hex[:8]
    scratch(marks)
    extra = {"error_strategy": strategy} if strategy else {}
    s = cluster.submit(
        command=["python3", "-c", GANG, str(marks)], cluster_size=3, resources={"cpu": 0.5}, **extra
    )
    return cluster.wait(s["id"], timeout=60)


@pytest.mark.parametrize(
    ("strategy", "rank", "type_"),
    [
        ("single", 0, "RuntimeError"),
        ("earliest", 2, "ConnectionResetError"),
        ("earliest_primary", 1, "ValueError"),
        (None, 1, "ValueError"),  # a gang's default
    ],
)
def test_each_strategy_names_its_worker(
    cluster: Cluster, tmp_path: Path, strategy: str | None, rank: int, type_: str
) -> None:
    done = gang(cluster, tmp_path, strategy)
    rc = done["root_cause"]
    assert done["status"] == "ERROR" and done["cause"] == "kernel_nonzero_exit", done
    assert (rc["rank"], rc["worker"], rc["type"]) == (rank, f"rank-{rank}", type_), rc
    assert rc["strategy"] == (strategy or "earliest_primary") == done["error_strategy"]
    assert rc["resolution"] == "ns" and rc["source"] == "corral"
    assert rc["agent"] == next(k["agent"] for k in done["kernels"] if k["rank"] == rank)

    errors = cluster.http.get(f"/api/v1/sessions/{done['id']}/errors").json()
    assert errors[0]["rank"] == rank and errors[0]["root_cause"] is True
    assert sorted(e["rank"] for e in errors) == [0, 1, 2]
    marks = {e["rank"]: e["primary"] for e in errors}
    assert marks == {0: False, 1: True, 2: False}  # peer gone, connection reset: side effects


def test_corral_run_prints_the_root_cause(cluster: Cluster, tmp_path: Path) -> None:
    marks = tmp_path / "run"
    scratch(marks)
    name = "gang-" + uuid.uuid4().hex[:6]
    done = cluster.corral(
        "run", "--name", name, "--cluster-size", "3", "--cpu", "0.5", "--", "python3", "-c", GANG, str(marks)
    )
    assert done.returncode == 1, done.stderr
    assert "corral: root cause: worker rank-1 on agent agent-" in done.stderr
    assert ": ValueError: bad batch" in done.stderr
    sid = next(s["id"] for s in cluster.http.get("/api/v1/sessions").json() if s["name"] == name)
    info = cluster.corral("session", "info", sid)
    assert "root cause: worker rank-1" in info.stdout and "recoverable: no" in info.stdout
    listed = cluster.corral("session", "errors", sid)
    assert listed.returncode == 0
    lines = [line for line in listed.stdout.splitlines() if "rank-" in line]
    assert "ROOT CAUSE" in lines[0] and "ValueError: bad batch" in lines[0]
    assert sum("side effect" in line for line in lines) == 2


RAISES = "from corral_worker import *\nwith record():\n    raise {}('{}')"


def test_the_worker_helper_decides_the_inline_retry(cluster: Cluster) -> None:
    inline = {"max_retries": 1, "retry_delay": 0}
    flaky = cluster.submit(
        command=["python3", "-c", RAISES.format("RecoverableError", "flaky disk")], retry_policy=inline
    )
    chain = settled_chain(cluster, flaky["id"], 2)
    assert chain[0]["root_cause"]["recoverable"] is True

    bad = cluster.submit(
        command=["python3", "-c", RAISES.format("ValueError", "bad input")], retry_policy=inline
    )
    [only] = settled_chain(cluster, bad["id"], 1)
    assert only["retry_state"] == "failed"
    assert "not recoverable" in only["retry_reason"]
    [record] = cluster.http.get(f"/api/v1/sessions/{only['id']}/errors").json()
    assert (record["type"], record["message"], record["recoverable"]) == ("ValueError", "bad input", False)
    assert any("not recoverable" in h["message"] for h in cluster.history(only["id"]))


def test_a_named_rule_on_recoverable(cluster: Cluster) -> None:
    policy = "recoverable-" + uuid.uuid4().hex[:6]
    doc = {
        "metadata": {"name": policy},
        "spec": {
            "rules": [{"action": "retry", "on_recoverable": True, "retry_limit": 1}],
            "default_action": "fail",
        },
    }
    assert cluster.http.post("/api/v1/retry-policies", json=doc).status_code == 201
    named = {"retry_policies": [policy]}
    flaky = cluster.submit(command=["python3", "-c", RAISES.format("RecoverableError", "x")], **named)
    assert settled_chain(cluster, flaky["id"], 2)[0]["retry_reason"].startswith(f"policy {policy} rule 1")
    bad = cluster.submit(command=["python3", "-c", RAISES.format("ValueError", "y")], **named)
    [only] = settled_chain(cluster, bad["id"], 1)
    assert only["retry_state"] == "failed"


# Each rank leaves a different unusable file, then fails; the session still ends with every record.
BAD_FILES = r"""
import os, sys
rank, path = int(os.environ["RANK"]), os.environ["CORRAL_ERROR_FILE"]
contents = [
    b"",
    b"{not json",
    b'{"message": "' + b"x" * (100 * 1024) + b'"}',
    bytes(range(256)) * 4,
    b"[" * 30000 + b"]" * 30000,
    b'{"schema": "corral.error/v1", "message": ["not", "text"]}',
]
if rank < len(contents):
    open(path, "wb").write(contents[rank])
else:
    os.mkfifo(path)
print("ValueError: rank", rank, "failed", file=sys.stderr, flush=True)
# All seven fail on their own: nobody exits before every rank has written its file, and then all
# exit at one agreed instant, at once (no interpreter teardown), so the gang's stop after the first
# failure cannot reach a rank still on its way out.
import pathlib, time
d = pathlib.Path(sys.argv[1]); (d / str(rank)).touch()
deadline = time.monotonic() + 30
while len(list(d.iterdir())) < 7 and time.monotonic() < deadline:
    time.sleep(0.02)
at = max(p.stat().st_mtime for p in d.iterdir()) + 0.5
time.sleep(max(0.0, at - time.time()))
os._exit(3)
"""


def test_bad_error_files_never_break_a_report(cluster: Cluster, tmp_path: Path) -> None:
    s = cluster.submit(
        command=["python3", "-c", BAD_FILES, str(tmp_path)],
        cluster_size=7,
        resources={"cpu": 0.5},
        error_strategy="earliest",
    )
    done = cluster.wait(s["id"], timeout=60)
    assert (done["status"], done["exit_code"]) == ("ERROR", 3)
    ended = [(k["rank"], k["status"], k["exit_code"]) for k in done["kernels"]]
    assert all(status == "ERROR" and code == 3 for _, status, code in ended), ended
    errors = cluster.http.get(f"/api/v1/sessions/{s['id']}/errors").json()
    by_rank = {e["rank"]: e for e in errors}
    assert sorted(by_rank) == list(range(7))
    assert all(e["source"] == "synthesized" and e["type"] == "ValueError" for e in errors)
    assert by_rank[0]["note"] is None and by_rank[6]["note"] is None  # empty file, FIFO: no record
    assert "not valid UTF-8 JSON" in by_rank[1]["note"]
    assert "over 64 KiB" in by_rank[2]["note"]
    assert "not valid UTF-8 JSON" in by_rank[3]["note"] and "not valid UTF-8 JSON" in by_rank[4]["note"]
    assert "without a string 'message'" in by_rank[5]["note"]
    assert done["root_cause"]["source"] == "synthesized"


def test_an_unknown_strategy_is_refused(cluster: Cluster) -> None:
    name = "strategy-" + uuid.uuid4().hex[:6]
    body = {"command": ["true"], "name": name, "error_strategy": "latest"}
    resp = cluster.http.post("/api/v1/sessions", json=body)
    assert resp.status_code == 422
    assert "error_strategy" in resp.text
    assert all(s["name"] != name for s in cluster.http.get("/api/v1/sessions").json())
    done = cluster.corral("run", "--error-strategy", "random", "--", "true")
    assert done.returncode != 0 and "error_strategy" in done.stderr
