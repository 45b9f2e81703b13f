"""`corral session logs -f`, the real CLI on the log stream: a kernel's lines as they are written,
stdout to stdout and stderr to stderr, and it returns 0 once the session has ended."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid

from tests.support.cluster import TERMINAL, Cluster, poll, scratch


def test_follow_prints_lines_as_they_are_written_and_returns_with_the_session(cluster: Cluster) -> None:
    gate = scratch(cluster.workdir / f"gate-{uuid.uuid4().hex[:6]}")
    script = f"echo first; echo oops >&2; while [ ! -e {gate}/go ]; do sleep 0.05; done; echo second"
    s = cluster.submit(command=["sh", "-c", script])
    env = {**cluster.env, "CORRAL_URL": cluster.url, "CORRAL_API_KEY": cluster.key}
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "session", "logs", "-f", s["id"][:8]],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)  # as it comes: the test polls this list

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        poll(lambda: out == ["first\n"], 60, "the first line on the CLI's stdout")
        assert proc.poll() is None and cluster.session(s["id"])["status"] not in TERMINAL
        (gate / "go").touch()
        assert proc.wait(60) == 0
        reader.join(10)
        assert "".join(out) == "first\nsecond\n"
        assert proc.stderr is not None and proc.stderr.read() == "oops\n"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_follow_streams_the_rank_asked_for(cluster: Cluster) -> None:
    s = cluster.submit(command=["sh", "-c", "echo rank $CORRAL_CLUSTER_RANK"], cluster_size=2)
    cluster.wait(s["id"])
    done = cluster.corral("session", "logs", "-f", "--kernel", "1", "--prefix", s["id"])
    assert (done.returncode, done.stdout) == (0, "[1] rank 1\n"), done.stderr
    whole = cluster.corral("session", "logs", "-k", "0", s["id"])  # without -f: a page at a time
    assert (whole.returncode, whole.stdout) == (0, "rank 0\n"), whole.stderr
    missing = cluster.corral("session", "logs", "-f", "--kernel", "2", s["id"])
    assert missing.returncode != 0 and "kernel" in missing.stderr, missing.stderr
