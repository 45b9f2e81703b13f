"""Output at disk speed, memory bounded: a session's end never waits for its output to drain."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import psutil

from tests.support.cluster import Cluster

MIB = 1 << 20
WRITER = (
    "import sys, time; line = b'x' * 1023 + b'\\n'; w = sys.stdout.buffer.write\n"
    "for _ in range({n}): w(line)\n"
    "sys.stdout.flush(); open({end!r}, 'w').write(repr(time.time()))"
)


class PeakRss(threading.Thread):
    """Samples a process's resident memory every 50 ms until stopped; `peak` in bytes."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak = self.proc.memory_info().rss
        self.stopped = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.05)

    def stop(self) -> int:
        self.stopped.set()
        self.join()
        return self.peak


def test_200_mb_of_output_ends_on_time_and_reads_back_whole(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    c = own_cluster()
    c.start_agent("loud")
    end = tmp_path / "end"
    s = c.submit(command=["python3", "-c", WRITER.format(n=200 * 1024, end=str(end))])
    final = c.wait(s["id"], timeout=120)
    assert (final["status"], final["result"]) == ("TERMINATED", "success")
    exited = float(end.read_text())
    assert datetime.fromisoformat(final["terminated_at"]).timestamp() - exited < 30

    assert c.manager is not None
    manager = PeakRss(c.manager.pid)
    baseline = manager.peak
    env = {**c.env, "CORRAL_URL": c.url, "CORRAL_API_KEY": c.key}
    out = tmp_path / "out"
    with out.open("wb") as sink:
        argv = [sys.executable, "-m", "corral", "session", "logs", "-f", s["id"]]
        cli = subprocess.Popen(argv, env=env, stdout=sink)
        reader = PeakRss(cli.pid)
        assert cli.wait(timeout=300) == 0
    cli_peak, manager_peak = reader.stop(), manager.stop()
    assert out.stat().st_size == 200 * MIB
    with out.open("rb") as f:
        assert f.read(1024) == b"x" * 1023 + b"\n"
    assert manager_peak - baseline < 150 * MIB, f"manager grew {(manager_peak - baseline) / MIB:.0f} MiB"
    assert cli_peak < 150 * MIB, f"the CLI used {cli_peak / MIB:.0f} MiB"


def test_the_log_cap_keeps_the_tail_and_says_what_it_dropped(own_cluster: Callable[..., Cluster]) -> None:
    c = own_cluster(env={"CORRAL_LOG_CAP_BYTES": str(MIB)})
    c.start_agent("chatty")
    script = 'BEGIN { for (i = 1; i <= 30000; i++) printf "line-%d-%080d\\n", i, 0; print "the-last-line" }'
    s = c.submit(command=["awk", script])
    assert c.wait(s["id"], timeout=120)["result"] == "success"
    text = c.stored_output(s["id"])
    assert text.endswith("the-last-line\n")
    assert len(text.encode()) <= MIB
    page = c.http.get(f"/api/v1/sessions/{s['id']}/logs").json()
    written = sum(len(f"line-{i}-{'0' * 80}\n") for i in range(1, 30001)) + len("the-last-line\n")
    assert page["dropped"] > 0 and page["dropped"] + len(text.encode()) == written
