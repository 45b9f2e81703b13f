"""Sessions run as real processes and end with the status, cause and exit code a user expects."""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from pathlib import Path

from tests.support.cluster import Cluster, poll


def test_run_prints_workload_output_exactly_and_exits_zero(cluster: Cluster) -> None:
    done = cluster.corral("run", "--", "python3", "-c", "print(42)")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "42\n"
    assert "TERMINATED" in done.stderr  # status lines go to stderr, never into the output


def test_nonzero_exit_becomes_the_cli_exit_code_and_the_cause(cluster: Cluster) -> None:
    done = cluster.corral("run", "-d", "--", "sh", "-c", "exit 3")
    session_id = done.stdout.strip()
    follow = cluster.corral("run", "--", "sh", "-c", "echo oops >&2; exit 3")
    assert follow.returncode == 3
    assert "oops" in follow.stderr
    s = cluster.wait(session_id)
    assert (s["status"], s["cause"], s["exit_code"]) == ("ERROR", "kernel_nonzero_exit", 3)
    assert s["kernels"][0]["exit_code"] == 3


def test_memory_limit_kills_for_real_and_reports_oom(cluster: Cluster) -> None:
    done = cluster.corral("run", "--mem", "64M", "--", "python3", "-c", "b = bytearray(400_000_000)")
    assert done.returncode == 137, done.stderr
    s = cluster.http.get("/api/v1/sessions", params={"limit": 1}).json()[0]
    assert (s["status"], s["cause"], s["exit_code"]) == ("ERROR", "oom_killed", 137)
    kernel = s["kernels"][0]
    assert kernel["oom_killed"] is True
    counter = kernel["detail"].get("oom_kill_counter")
    if kernel["detail"].get("memory_mode") in ("cgroup1", "cgroup2"):
        assert counter["after"] > counter["before"], kernel["detail"]


def test_allocation_under_the_limit_succeeds(cluster: Cluster) -> None:
    done = cluster.corral(
        "run", "--mem", "64M", "--", "python3", "-c", "b = bytearray(40_000_000); print(len(b))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "40000000\n"


def test_sigkill_is_a_nonzero_exit_with_signal_not_an_oom(cluster: Cluster) -> None:
    done = cluster.corral("run", "-d", "--", "sh", "-c", "kill -9 $$")
    s = cluster.wait(done.stdout.strip())
    assert (s["status"], s["cause"], s["exit_code"]) == ("ERROR", "kernel_nonzero_exit", 137)
    kernel = s["kernels"][0]
    assert kernel["signal"] == 9
    assert kernel["oom_killed"] is False


def test_gang_kernels_get_their_ranks(cluster: Cluster) -> None:
    done = cluster.corral(
        "run",
        "--cluster-size",
        "3",
        "--",
        "sh",
        "-c",
        "echo rank=$CORRAL_CLUSTER_RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT",
    )
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    assert [line.split()[0] for line in lines] == ["rank=0", "rank=1", "rank=2"]
    assert all("world=3" in line for line in lines)
    masters = {line.split()[2] for line in lines}
    assert len(masters) == 1 and not masters.pop().endswith(":")


def test_one_failing_kernel_stops_its_peers_and_fails_the_session(cluster: Cluster) -> None:
    script = 'if [ "$CORRAL_CLUSTER_RANK" = 1 ]; then sleep 0.5; exit 5; fi; sleep 60'
    s = cluster.submit(command=["sh", "-c", script], cluster_size=3, resources={"cpu": 0.5})
    s = cluster.wait(s["id"], timeout=40)
    assert (s["status"], s["cause"], s["exit_code"]) == ("ERROR", "kernel_nonzero_exit", 5)
    assert s["root_cause"]["rank"] == 1
    peers = [k for k in s["kernels"] if k["rank"] != 1]
    assert all(k["killed_by_corral"] and k["status"] in ("ERROR", "TERMINATED") for k in peers), peers
    assert all(k["status"] in ("ERROR", "TERMINATED", "CANCELLED") for k in s["kernels"])


def test_a_kernel_that_exits_zero_early_does_not_stop_its_peers(cluster: Cluster) -> None:
    script = 'if [ "$CORRAL_CLUSTER_RANK" = 0 ]; then exit 0; fi; sleep 1; echo late-$CORRAL_CLUSTER_RANK'
    s = cluster.submit(command=["sh", "-c", script], cluster_size=2, resources={"cpu": 0.5})
    s = cluster.wait(s["id"])
    assert (s["status"], s["result"]) == ("TERMINATED", "success")
    assert all(k["exit_code"] == 0 and not k["killed_by_corral"] for k in s["kernels"])
    assert "late-1" in cluster.output(s["id"])


def test_history_lists_each_outcome_with_handler_message_and_time(cluster: Cluster) -> None:
    s = cluster.submit(command=["true"])
    cluster.wait(s["id"])
    rows = cluster.corral_json("session", "history", s["id"])
    handlers = [r["handler"] for r in rows]
    for expected in (
        "ScheduleNewSessions",
        "PrepareSessions",
        "StartSessions",
        "PromoteToRunning",
        "PromoteToTerminated",
    ):
        assert expected in handlers
    assert all(r["created_at"] and r["result"] for r in rows)
    # Prepared and started by its agent in one go, every status is still recorded, in order.
    moves = [r["to_status"] for r in rows if r["to_status"]]
    assert moves == ["SCHEDULED", "PREPARING", "PREPARED", "CREATING", "RUNNING", "TERMINATING", "TERMINATED"]
    placed = next(r for r in rows if r["handler"] == "ScheduleNewSessions")
    assert placed["message"].startswith("placed on agent-")
    table = cluster.corral("session", "history", s["id"])
    assert table.returncode == 0 and "ScheduleNewSessions" in table.stdout


def test_cancel_of_a_running_session_terminates_it(cluster: Cluster) -> None:
    s = cluster.submit(command=["sleep", "60"])
    cluster.wait(s["id"], {"RUNNING"})
    done = cluster.corral("session", "cancel", s["id"])
    assert done.returncode == 0, done.stderr
    s = cluster.wait(s["id"], timeout=30)
    assert (s["status"], s["cause"]) == ("TERMINATED", "user_cancelled")
    assert cluster.corral("session", "cancel", s["id"]).returncode != 0


def test_a_request_larger_than_every_agent_is_refused_naming_the_resource(cluster: Cluster) -> None:
    for resources, field in (({"cpu": 3}, "resources.cpu"), ({"mem": "1024T"}, "resources.mem")):
        resp = cluster.http.post("/api/v1/sessions", json={"command": ["true"], "resources": resources})
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["details"]["field"] == field
        assert "more than any agent" in resp.json()["error"]["message"]


def test_a_group_with_no_agent_yet_accepts_and_says_why_it_waits(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster()
    c.start_agent("elsewhere", resource_group="other")  # the default group has no agent at all
    s = c.submit(command=["true"], resources={"cpu": 64})
    poll(lambda: c.session(s["id"]).get("waiting_reason"), 20, "the scheduler to say why it waits")
    assert "unschedulable" in c.session(s["id"])["waiting_reason"]
    info = c.corral("session", "info", s["id"])
    assert info.returncode == 0 and "waiting: unschedulable" in info.stdout


def test_a_session_that_cannot_fit_waits_with_one_collapsed_skip_row(cluster: Cluster) -> None:
    # Each kernel fits an agent (2 CPUs each), but three of them never fit the two agents at once.
    s = cluster.submit(command=["true"], resources={"cpu": 2}, cluster_size=3)

    def skip_count() -> int:
        rows = [h for h in cluster.history(s["id"]) if h["result"] == "SKIPPED"]
        assert len(rows) <= 1, rows
        return rows[0]["count"] if rows else 0

    poll(lambda: skip_count() >= 3, 30, "the skip row to be counted several times")
    assert cluster.session(s["id"])["status"] == "PENDING"
    done = cluster.corral("session", "cancel", s["id"])
    assert done.returncode == 0, done.stderr
    final = cluster.wait(s["id"])
    assert (final["status"], final["cause"]) == ("CANCELLED", "user_cancelled")


def test_a_size_in_an_unknown_unit_is_refused_listing_the_forms(cluster: Cluster) -> None:
    for mem in ("64m", "2g", "1k", "10 bytes"):
        resp = cluster.http.post("/api/v1/sessions", json={"command": ["true"], "resources": {"mem": mem}})
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["details"]["field"] == "resources.mem"
        assert "Ki, Mi, Gi, Ti" in resp.json()["error"]["message"]
    done = cluster.corral("run", "--mem", "64m", "--", "true")
    assert done.returncode != 0 and "Ki, Mi, Gi, Ti" in done.stderr
    assert cluster.corral("run", "--mem", "64MiB", "--", "true").returncode == 0


def test_kernels_start_where_the_user_submits_from(cluster: Cluster, tmp_path: Path) -> None:
    """As sbatch: the README's `corral run --max-retries 3 -- ./flaky.sh` from the script's directory."""
    script = tmp_path / "flaky.sh"
    script.write_text(
        '#!/bin/sh\necho "attempt $CORRAL_ATTEMPT in $(pwd)"\n[ "$CORRAL_ATTEMPT" -ge 2 ] || exit 75\n'
    )
    script.chmod(0o755)
    done = cluster.corral("run", "--max-retries", "3", "--retry-delay", "0", "--", "./flaky.sh", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"attempt 1 in {tmp_path}", f"attempt 2 in {tmp_path}"]
    # --chdir overrides; the kernel's own directory stays $CORRAL_WORK_DIR.
    where = tmp_path / "elsewhere"
    where.mkdir(mode=0o777)
    where.chmod(0o777)
    shown = cluster.corral(
        "run", "--chdir", str(where), "--", "sh", "-c", 'pwd; echo "$CORRAL_WORK_DIR"', cwd=tmp_path
    )
    here, own = shown.stdout.splitlines()
    assert here == str(where) and own != str(where) and Path(own).is_absolute(), shown.stdout
    # Through the API, without a workdir: the kernel's private directory, as before.
    s = cluster.submit(command=["sh", "-c", 'test "$(pwd)" = "$CORRAL_WORK_DIR" && echo same'])
    assert cluster.output(cluster.wait(s["id"])["id"]).strip() == "same"
    bad = cluster.http.post("/api/v1/sessions", json={"command": ["true"], "workdir": "relative/dir"})
    assert bad.status_code == 422 and bad.json()["error"]["details"]["field"] == "workdir", bad.text


def test_a_directory_the_kernel_cannot_enter_ends_it_with_126(cluster: Cluster, tmp_path: Path) -> None:
    gone = tmp_path / "not-there"
    s = cluster.submit(command=["true"], workdir=str(gone))
    done = cluster.wait(s["id"])
    assert (done["status"], done["exit_code"], done["cause"]) == ("ERROR", 126, "kernel_nonzero_exit"), done
    assert (
        f"cannot enter {gone} as " in done["root_cause"]["message"]
        and "no such directory" in done["root_cause"]["message"]
    ), done["root_cause"]
    if os.geteuid() == 0:  # kernels run as the corral account: a root-only directory is closed to them
        closed = tmp_path / "roots-only"
        closed.mkdir(mode=0o700)
        closed.chmod(0o700)
        done = cluster.wait(cluster.submit(command=["true"], workdir=str(closed))["id"])
        account = f"corral (uid {pwd.getpwnam('corral').pw_uid})"
        assert done["exit_code"] == 126
        assert done["root_cause"]["message"] == (
            f"exited with code 126: cannot enter {closed} as {account}: permission denied"
        ), done["root_cause"]
