"""The CLI's views of a session whose messages look like Rich markup (every torch/gloo peer error
has a "[/__w/pytorch/…]"): each exits 0 and shows the text as it is."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

from corral.domain.events import Position
from tests.support.cluster import Cluster
from tests.support.tenants import insert_session

MARKUP = "[/x] [bold]y [/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553]"
FAILS = f"""
import os
from corral_worker import record
open(os.environ["CORRAL_TERMINATION_LOG"], "w").write({MARKUP!r})
with record():
    raise RuntimeError({MARKUP!r})
"""


def test_every_view_prints_markup_literally(cluster: Cluster) -> None:
    s = cluster.submit(
        command=["python3", "-c", FAILS], retry_policy={"max_retries": 1, "retry_delay": 0, "jitter": "none"}
    )
    ended = cluster.wait(s["id"])
    assert ended["status"] == "ERROR"
    views = {
        ("session", "errors", s["id"]): True,
        ("session", "info", s["id"]): True,
        ("session", "history", s["id"]): False,
        ("session", "attempts", s["id"]): False,
        ("session", "list", "--limit", "5"): False,
        ("events", "--session", s["id"]): False,
        ("agent", "list"): False,
    }
    for args, shows_message in views.items():
        done = cluster.corral(*args)
        assert done.returncode == 0, (args, done.stderr)
        assert "MarkupError" not in done.stderr
        if shows_message:
            assert MARKUP in done.stdout, (args, done.stdout)
    errors = json.loads(cluster.corral("session", "errors", s["id"], "-o", "json").stdout)
    assert errors[0]["message"] == MARKUP


def test_version_and_shell_completion() -> None:
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "corral", "--version"], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, f"corral {version('corral')}\n")
    script = subprocess.run(
        [sys.executable, "-m", "corral", "--show-completion", "bash"], capture_output=True, text=True
    )
    assert script.returncode == 0 and "complete " in script.stdout and "_CORRAL_COMPLETE" in script.stdout


def test_cancel_says_what_was_accepted_and_status_is_any_case(cluster: Cluster) -> None:
    s = cluster.submit(command=["sleep", "600"])
    cluster.wait(s["id"], {"RUNNING"})
    running = json.loads(cluster.corral("session", "list", "--status", "running", "-o", "json").stdout)
    assert s["id"] in {r["id"] for r in running} and {r["status"] for r in running} == {"RUNNING"}
    done = cluster.corral("session", "cancel", s["id"][:8])
    assert done.returncode == 0, done.stderr
    assert f"session {s['id'][:8]}: cancel accepted; it is TERMINATING (it was RUNNING)" in done.stdout
    assert cluster.wait(s["id"])["cause"] == "user_cancelled"
    queued = str(uuid.uuid4())
    insert_session(cluster.database_url, queued, "default", "admin")  # in a group no agent serves
    said = cluster.corral("session", "cancel", queued).stdout
    assert "cancel accepted; it will be CANCELLED (it was PENDING)" in said
    bad = cluster.http.get("/api/v1/sessions", params={"status": "runing"})
    assert bad.status_code == 422 and "RUNNING" in bad.json()["error"]["message"]


def test_events_show_the_newest_first_within_100_columns(cluster: Cluster) -> None:
    made = [cluster.submit(command=["sh", "-c", "exit 3"]) for _ in range(4)]  # 4 x 5+ events
    for m in made:
        cluster.wait(m["id"])
    s = made[-1]
    rows = json.loads(cluster.corral("events", "--limit", "20", "-o", "json").stdout)
    ids = [r["id"] for r in rows]
    # newest first in commit order: ids are taken before commit, so only positions are sorted
    positions = [Position.parse(r["position"]) for r in rows]
    assert positions == sorted(positions, reverse=True) and len(set(ids)) == 20
    newest = cluster.http.get("/api/v1/events", params={"newest": True, "limit": 1}).json()
    assert ids[0] >= newest[0]["id"] - 50  # other tests' sessions may add some meanwhile
    table = cluster.corral("events", "--session", s["id"][:8])
    assert table.returncode == 0 and s["id"][:8] in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 100, table.stdout


def test_session_list_watch_refreshes_in_place_until_ctrl_c(cluster: Cluster) -> None:
    env = {**cluster.env, "CORRAL_URL": cluster.url, "CORRAL_API_KEY": cluster.key, "COLUMNS": "120"}
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "session", "list", "--watch", "0.3", "--limit", "3"],
        env=env,
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 30
    try:
        while seen.count(b"every 0.3 s") < 3 and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1)
            if ready:
                seen += os.read(leader, 65536)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    assert seen.count(b"every 0.3 s") >= 3, seen[-2000:]
    assert b"\x1b[" in seen  # the cursor goes back up: the table is redrawn, not appended


def test_whoami_shows_the_priorities_a_run_is_held_to(cluster: Cluster) -> None:
    """`corral run --priority` points to `corral whoami` for the default and the allowed range:
    what whoami shows is what a run is refused by."""
    project, user = "prio-" + uuid.uuid4().hex[:6], "who-" + uuid.uuid4().hex[:6]
    made = cluster.corral("project", "create", project, "--priority-rules", '{"default": 5, "max": 20}')
    assert made.returncode == 0, made.stderr
    key = cluster.corral_json("user", "create", user, "--project", project)["key"]["key"]
    env = {**cluster.env, "CORRAL_URL": cluster.url, "CORRAL_API_KEY": key}

    def as_user(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "corral", *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)

    shown = as_user("whoami")
    assert shown.returncode == 0, shown.stderr
    assert [project, "5", "0..20"] in [line.split() for line in shown.stdout.splitlines()], shown.stdout
    refused = as_user("run", "--priority", "21", "--", "true")
    assert refused.returncode == 2 and "0..20" in refused.stderr, refused.stderr


SHOWS_ONLY = """
import runpy, sys
sys.argv = ["corral", *sys.argv[1:]]
try:
    runpy.run_module("corral", run_name="__main__")
except SystemExit as done:
    code = done.code
print("LOADED", *sorted(m for m in ("pydantic", "rich") if m in sys.modules), "EXIT", code, file=sys.stderr)
"""


def test_a_command_that_only_shows_answers_loads_neither_pydantic_nor_rich(cluster: Cluster) -> None:
    """The CLI prints the API's JSON as sent (`Client.raw`): reading it into result types would
    import pydantic, the largest part of a short command's start (bench/cli.py times it)."""
    s = cluster.submit(command=["true"])
    cluster.wait(s["id"])
    env = {**cluster.env, "CORRAL_URL": cluster.url, "CORRAL_API_KEY": cluster.key}
    shown = {
        ("session", "list"): s["id"],
        ("session", "history", s["id"]): "PromoteToTerminated",
        ("user", "list"): "admin",
        ("rg", "list"): "default",
    }
    for args, expected in shown.items():
        done = subprocess.run(
            [sys.executable, "-c", SHOWS_ONLY, *args], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.stderr.strip().splitlines()[-1] == "LOADED EXIT 0", (args, done.stderr)
        assert expected in done.stdout, (args, done.stdout)


def test_events_follow_prints_each_event_as_it_commits_from_a_position(cluster: Cluster) -> None:
    """`corral events -f --after P -o json`: one JSON line per event, after P and in commit order,
    the same events `GET /events` returns; Ctrl-C (SIGINT) ends it with status 0."""
    first = cluster.submit(command=["true"])
    cluster.wait(first["id"])
    start = cluster.http.get("/api/v1/events", params={"session": first["id"]}).json()[-1]["position"]
    env = {**cluster.env, "CORRAL_URL": cluster.url, "CORRAL_API_KEY": cluster.key}
    argv = [sys.executable, "-m", "corral", "events", "-f", "--after", start, "-t", "session.status_changed"]
    proc = subprocess.Popen([*argv, "-o", "json"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        s = cluster.submit(command=["true"])
        assert proc.stdout is not None
        lines: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while not any(e["session_id"] == s["id"] and e["to_status"] == "TERMINATED" for e in lines):
            assert time.monotonic() < deadline, lines
            lines.append(json.loads(proc.stdout.readline()))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.communicate()  # closes its pipe
    expected = cluster.http.get(
        "/api/v1/events", params={"after": start, "type": "session.status_changed", "limit": 1000}
    ).json()
    assert lines == expected[: len(lines)] and lines[0]["position"] != start
