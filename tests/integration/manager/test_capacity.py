"""Capacity is never exceeded: 300 short sessions on 2 agents that fit 2 each."""

from __future__ import annotations

import shlex
from collections import Counter
from pathlib import Path

from tests.support.cluster import TERMINAL, Cluster, poll


def test_three_hundred_sessions_never_overlap_more_than_capacity(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "intervals.txt"
    stamp = "$(python3 -c 'import time; print(time.time_ns())')"
    script = (
        f'echo "{stamp} start $CORRAL_SESSION_ID" >> {shlex.quote(str(log))}; sleep 0.5; '
        f'echo "{stamp} end $CORRAL_SESSION_ID" >> {shlex.quote(str(log))}'
    )
    ids = [cluster.submit(command=["sh", "-c", script], resources={"cpu": 1})["id"] for _ in range(300)]

    def all_done() -> bool:
        page = cluster.http.get("/api/v1/sessions", params={"limit": 1000}).json()
        mine = [s for s in page if s["id"] in set(ids)]
        return len(mine) == 300 and all(s["status"] in TERMINAL for s in mine)

    poll(all_done, 300, "all 300 sessions to end", interval=1.0)
    finals = [cluster.session(i) for i in ids]
    assert Counter((s["status"], s["result"]) for s in finals) == {("TERMINATED", "success"): 300}

    events = [line.split() for line in log.read_text().splitlines()]
    starts = Counter(sid for _, kind, sid in events if kind == "start")
    assert set(starts) == set(ids) and set(starts.values()) == {1}, "each session ran exactly once"
    running = peak = 0
    for _, kind, _ in sorted(events, key=lambda e: (int(e[0]), e[1] == "start")):
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak <= 4, f"{peak} sessions ran at once on 4 CPUs"
    assert peak >= 2, "the sessions never ran side by side: this test would prove nothing"
